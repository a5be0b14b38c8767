"""Acceptance profiles from a published mean accepted length (issue 18, "Acceptance profiles").

Papers and leaderboards publish tau: tokens per round, bonus included, at one tree (EAGLE-2's
60-token dynamic tree, Medusa's 63-node tree, prompt lookup's 10-token chain). A profile that
reproduces tau is derived here:
- a chain (tree size = depth): the i.i.d. alpha solving Leviathan's Eq. 1, (1 - a^(k+1)) / (1 - a) = tau;
- a tree: geometric ranks p_r = a (1 - a)^(r - 1), r = 1..GEOMETRIC_RANKS (one parameter; the
  rank-r child is accepted as often as the top r - 1 were rejected and then a draw of a), with `a`
  chosen so that the optimal tree of the published size and depth (Sequoia's DP, tree/optimal.py)
  expects tau tokens a round. A dynamic tree (EAGLE-2/3) adapts to the context, so the static
  optimum stands in for it: the profile matches tau at the published size, not its per-round shape.
The solve is a bracketed root (scipy.optimize.brentq): tokens per round grow from 1 (a = 0) to
depth + 1 (a = 1), so a tau outside (1, depth + 1) has no profile and is refused.
"""

from __future__ import annotations

from scipy.optimize import brentq

from dfvg_dse.acceptance.chain import expected_tokens_chain
from dfvg_dse.specs import AcceptanceProfile, InputError
from dfvg_dse.specs.measurements import MeasurementSource, SpeculativeResult
from dfvg_dse.tree.optimal import optimal_tree

GEOMETRIC_RANKS = 8
_EDGE = 1e-9  # a in [_EDGE, 1 - _EDGE]: both ends finite
_XTOL = 1e-7


def geometric_ranks(a: float, ranks: int = GEOMETRIC_RANKS) -> tuple[float, ...]:
    """p_r = a (1 - a)^(r - 1) for r = 1..ranks (their sum 1 - (1 - a)^ranks is <= 1)."""
    return tuple(a * (1.0 - a) ** r for r in range(ranks))


def is_chain(tree_tokens: int, tree_depth: int) -> bool:
    return tree_tokens == tree_depth


def tokens_per_round(rank_probs: tuple[float, ...], tree_tokens: int, tree_depth: int) -> float:
    """Expected tokens per round (bonus included) of the published shape under a rank vector: the
    chain of that length, or the optimal tree of that many draft tokens and depth."""
    if is_chain(tree_tokens, tree_depth):
        return float(expected_tokens_chain(rank_probs[0], tree_depth))
    return optimal_tree(AcceptanceProfile("derived", rank_probs), tree_tokens, tree_depth).expected_tokens


def _check(tau: float, tree_tokens: int, tree_depth: int) -> None:
    if not (isinstance(tree_depth, int) and isinstance(tree_tokens, int) and 1 <= tree_depth <= tree_tokens):
        raise InputError(f"tree of {tree_tokens} draft tokens and depth {tree_depth}: need integers "
                         "1 <= depth <= tokens")
    if not 1.0 < tau < tree_depth + 1:
        raise InputError(f"mean accepted tokens {tau!r} at depth {tree_depth}: must lie in (1, {tree_depth + 1}) "
                         "(1 = nothing accepted, depth + 1 = every level and the bonus token)")


def rank_probs_from_tau(tau: float, tree_tokens: int, tree_depth: int) -> tuple[float, ...]:
    """The rank vector (a scalar alpha for a chain, geometric ranks for a tree) whose published shape
    expects `tau` tokens a round."""
    _check(tau, tree_tokens, tree_depth)
    if is_chain(tree_tokens, tree_depth):
        alpha = brentq(lambda a: float(expected_tokens_chain(a, tree_depth)) - tau, _EDGE, 1.0 - _EDGE, xtol=_XTOL)
        return (round(alpha, 6),)
    a = brentq(lambda x: tokens_per_round(geometric_ranks(x), tree_tokens, tree_depth) - tau, _EDGE, 1.0 - _EDGE,
               xtol=_XTOL)
    return tuple(round(p, 6) for p in geometric_ranks(a))


def profile_from_tau(name: str, tau: float, tree_tokens: int, tree_depth: int, source: str) -> AcceptanceProfile:
    return AcceptanceProfile(name, rank_probs_from_tau(tau, tree_tokens, tree_depth), source=source)


def published_profile_name(source_id: str, row: SpeculativeResult) -> str:
    """`SOURCE/TARGET/METHOD/DEVICE/tT`, e.g. spec-eagle3-paper/llama-3.1-8b/eagle3/rtx-3090/t0."""
    return f"{source_id}/{row.target}/{row.method}/{row.device}/t{row.temperature:g}"


def published_profile(source: MeasurementSource, row: SpeculativeResult, name: str) -> tuple[AcceptanceProfile, dict]:
    """The profile reproducing a published row's tau at its tree, and its file's metadata."""
    chain = is_chain(row.tree_tokens, row.tree_depth)
    text = (f"{source.title}, {row.where} ({source.url}): tau = {row.mean_accepted_tokens:g} tokens a round at "
            f"{row.tree_tokens} draft tokens, depth {row.tree_depth}; rank vector derived from tau "
            f"({'i.i.d. alpha of the chain' if chain else 'geometric ranks on the optimal tree'})")
    profile = profile_from_tau(name, row.mean_accepted_tokens, row.tree_tokens, row.tree_depth, text)
    meta = {"target": row.target, "draft": row.draft or row.method, "workload": row.where,
            "temperature": row.temperature, "tag": "derived",
            "notes": f"derived by `dfvg-dse acceptance from-tau --measurements {source.id}`; a {row.method} drafter "
                     f"on {row.device}, {source.engine}",
            "fit": {"method": "from-tau", "measurements": source.id, "where": row.where,
                    "mean_accepted_tokens": row.mean_accepted_tokens, "tree_tokens": row.tree_tokens,
                    "tree_depth": row.tree_depth, "family": "chain-alpha" if chain else "geometric-ranks"}}
    return profile, meta
