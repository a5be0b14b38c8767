"""What an acceptance profile accepts but the user should know before trusting a tree's score.

Ranks are ordered by the draft's own probability, so a rank vector whose later entry beats an
earlier one is most likely a typo; and a profile that gives rank r no probability makes every
tree node of rank >= r unacceptable, so such a tree scores as its narrower sub-tree."""

from __future__ import annotations

from dfvg_dse.specs import AcceptanceProfile, TreeSpec


def acceptance_warnings(profile: AcceptanceProfile, tree: TreeSpec | None = None) -> list[str]:
    """Warnings about `profile`, and about scoring `tree` with it (None: no tree). Ranks that rise
    are flagged only in vectors typed on the command line: a measured profile may rise for real
    (Sequoia's demo vector has p_9 > p_8) and says so in its own notes."""
    warnings = []
    rows = profile.depth_rank or (profile.rank_probs,)  # what the model reads (AcceptanceProfile.matrix)
    labels = [f" at depth {d + 1}" for d in range(len(rows))] if profile.depth_rank else [""]
    if profile.source == "command line":
        for where, row in zip(labels, rows):
            rises = [r for r in range(1, len(row)) if row[r] > row[r - 1]]
            if rises:
                r = rises[0]
                warnings.append(f"acceptance '{profile.name}'{where}: rank {r + 1} ({row[r]:g}) is likelier than "
                                f"rank {r} ({row[r - 1]:g}); ranks follow the draft's own order, so this is usually a typo")
    if tree is None or profile.trace is not None:  # a trace replays every rank the draft produced
        return warnings
    dead = [False] * tree.n_nodes  # parents come first, so one pass marks whole dead subtrees
    depth = [0] * tree.n_nodes
    for i in range(1, tree.n_nodes):
        depth[i] = depth[tree.parents[i]] + 1
        row = rows[min(depth[i] - 1, len(rows) - 1)]
        dead[i] = dead[tree.parents[i]] or tree.ranks[i] >= len(row) or row[tree.ranks[i]] == 0.0
    count = sum(dead)
    if count:
        if len(rows) == 1 and len(rows[0]) == 1:
            what = (f"a scalar acceptance ({rows[0][0]:g}) gives every sibling of rank >= 2 zero probability, so "
                    "this tree scores as its rank-1 chain")
        else:
            what = f"acceptance '{profile.name}' gives some of the tree's ranks zero probability"
        warnings.append(f"{what}: {count} of the tree's {tree.budget} draft tokens can never be accepted; give a "
                        "rank vector (0.63,0.11,0.06) or a pair: profile")
    return warnings
