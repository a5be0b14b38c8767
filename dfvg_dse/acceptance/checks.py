"""What an acceptance profile accepts but the user should know before trusting a tree's score.

Ranks are ordered by the draft's own probability, so a rank vector whose later entry beats an
earlier one is most likely a typo; and a profile that gives rank r no probability makes every
tree node of rank >= r unacceptable, so such a tree scores as its narrower sub-tree."""

from __future__ import annotations

from dfvg_dse.specs import AcceptanceProfile, TreeSpec


def acceptance_warnings(profile: AcceptanceProfile, tree: TreeSpec | None = None) -> list[str]:
    """Warnings about `profile`, and about scoring `tree` with it (None: no tree)."""
    warnings = []
    rows = [("", profile.rank_probs)] + [(f" at depth {d + 2}", row) for d, row in enumerate(profile.depth_rank or ())]
    for where, row in rows:
        rises = [r for r in range(1, len(row)) if row[r] > row[r - 1]]
        if rises:
            r = rises[0]
            warnings.append(f"acceptance '{profile.name}'{where}: rank {r + 1} ({row[r]:g}) is likelier than rank {r} "
                            f"({row[r - 1]:g}); ranks follow the draft's own order, so this is usually a typo")
    if tree is None or profile.trace is not None:  # a trace replays every rank the draft produced
        return warnings
    known = max(len(row) for _, row in rows)
    dead = [False] * tree.n_nodes  # parents come first, so one pass marks whole dead subtrees
    for i in range(1, tree.n_nodes):
        dead[i] = tree.ranks[i] >= known or dead[tree.parents[i]]
    dead = sum(dead)
    if dead:
        if known == 1:
            what = (f"a scalar acceptance ({profile.rank_probs[0]:g}) gives every sibling of rank >= 2 zero "
                    "probability, so this tree scores as its rank-1 chain")
        else:
            what = f"acceptance '{profile.name}' gives ranks above {known} zero probability"
        warnings.append(f"{what}: {dead} of the tree's {tree.budget} draft tokens can never be accepted; give a rank "
                        "vector (0.63,0.11,0.06) or a pair: profile")
    return warnings
