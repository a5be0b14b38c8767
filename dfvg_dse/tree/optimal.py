"""Optimal static trees: Sequoia's dynamic program, a per-level width cap, hardware-aware choice.

Sequoia (Chen et al., NeurIPS 2024, Alg. 1 and its repo's depth-bounded form): the best subtree
with m nodes rooted at depth delta gives its children, in rank order 1..b, subtrees of sizes y_1..y_b:

    G[delta][m] = 1 + max_b H_b[m - 1],   H_b[m'] = max_y H_{b-1}[m' - y] + P[delta+1, b] * G[delta+1][y]

with the depth counted from the root (so a depth x rank matrix plugs in) and children always a
prefix of the ranks, as in Sequoia. Each max-plus convolution is one numpy pass over the (m', y)
triangle, read through a sliding window of H (no index arrays) in row blocks of bounded memory.
Its cost is depth x ranks x budget^2 / 2 steps; past MAX_DP_STEPS the DP refuses up front, naming
the depth or budget that fits (docs/acceptance-and-trees.md, "Limits").

What Sequoia lacks: a per-level width cap k_max (an FPGA drafts at most `lanes` branches per step).
Under a cap the subtree decomposition no longer holds, so `greedy_tree` grows the tree node by node
in decreasing path probability f(v), skipping levels that are full. With P non-increasing in rank
at every depth this is optimal: at a given depth every subtree scales with f(v), so the best w nodes
of a level are the w most probable, and their children dominate those of any other choice
(tests check it against brute-force enumeration). Without a cap and with such P it returns the same
F as the DP.

Conventions: budget = draft tokens (nodes without the root), depth = levels below the root.
Sequoia's "n = 16, depth 10" is our budget 15, depth 9.
"""

from __future__ import annotations

import heapq
from typing import Callable, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from dfvg_dse.acceptance.expected import expected_tokens
from dfvg_dse.specs import AcceptanceProfile, InputError, TreeSpec
from dfvg_dse.tree.shapes import MAX_TREE_DEPTH, MAX_TREE_TOKENS

_NEG = -np.inf
# 1-2.5 ns a step: 2-5 s on the idle 2-core dev machine, up to 15 s when busy (docs/acceptance-and-trees.md, "Limits")
MAX_DP_STEPS = 2e9
_BLOCK_CELLS = 1 << 18  # (m', y) cells per numpy pass: 2 MB of float64


class DPTable(NamedTuple):
    """Sequoia DP for one depth limit: best F for every node count, and what to rebuild trees from."""

    best: np.ndarray  # best[m]: best F with exactly m nodes (root included), -inf if infeasible
    g: list  # g[delta][m] for every depth delta
    n_children: list  # n_children[delta][m]: children of a subtree root of m nodes
    split: list  # split[delta][b][m']: nodes given to child b when b children share m'


def _ranks(profile: AcceptanceProfile) -> int:
    rows = profile.depth_rank or (profile.rank_probs,)
    return max(len(r) for r in rows)


def dp_steps(budget: int, max_depth: int, ranks: int) -> float:
    """Work of sequoia_dp in (m', y) cells: depth x ranks x (budget + 1)^2 / 2. A tree of `budget`
    draft tokens is never deeper or wider at a node than `budget`, so both are capped by it."""
    return min(max_depth, budget) * min(ranks, budget) * (budget + 1) ** 2 / 2


def _check_dp(budget: int, max_depth: int, ranks: int) -> None:
    """Refuse a DP past MAX_DP_STEPS up front, naming the depth (at this budget) and the budget (at
    this depth) that fit."""
    steps = dp_steps(budget, max_depth, ranks)
    if steps <= MAX_DP_STEPS:
        return
    depth_fits = int(MAX_DP_STEPS // dp_steps(budget, 1, ranks))
    budget_fits = max(b for b in range(1, budget + 1) if dp_steps(b, max_depth, ranks) <= MAX_DP_STEPS)
    depth = min(max_depth, budget)
    at_budget = f"depth <= {depth_fits} at budget {budget} or " if depth_fits else ""
    raise InputError(f"tree: Sequoia DP for budget {budget}, depth {depth}, {min(ranks, budget)} ranks: {steps:.1e} "
                     f"steps, past the {MAX_DP_STEPS:.2g} limit (about 5 s); use {at_budget}budget <= "
                     f"{budget_fits} at depth {depth}")


def _maxplus(h: np.ndarray, child: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """out[m'] = max over 1 <= y <= m' of h[m' - y] + child[y], and the smallest maximising y
    (0 where no y is feasible): the children of ranks 1..b share m' nodes, child b gets y."""
    m_max = len(h)
    padded = np.concatenate([h[::-1], np.full(m_max - 1, _NEG)])
    window = sliding_window_view(padded, m_max)  # window[m_max - 1 - m', y] = h[m' - y], -inf for y > m'
    out, arg = np.full(m_max, _NEG), np.zeros(m_max, dtype=np.int16)
    rows = max(1, _BLOCK_CELLS // m_max)
    for lo in range(1, m_max, rows):  # m' in [lo, hi), only y < hi can fit
        hi = min(m_max, lo + rows)
        cand = window[m_max - hi:m_max - lo, 1:hi] + child[1:hi]  # (hi - lo, hi - 1), rows m' = hi - 1 .. lo
        best_y = np.argmax(cand, axis=1)  # first maximum: the smallest y, as Sequoia's loop over sizes
        value = cand[np.arange(len(best_y)), best_y]
        out[lo:hi] = value[::-1]
        arg[lo:hi] = np.where(np.isfinite(value), best_y + 1, 0)[::-1]
    return out, arg


def check_sequoia(profile: AcceptanceProfile, budget: int, max_depth: int, max_branch: int | None = None) -> int:
    """Refuse, before any work, a DP that sequoia_dp would refuse (too large a tree or table); the
    ranks it would use."""
    _check(budget, max_depth)
    k = min(_ranks(profile), max_branch or _ranks(profile), budget)  # a node has at most `budget` children
    _check_dp(budget, min(max_depth, budget), k)
    return k


def sequoia_dp(profile: AcceptanceProfile, budget: int, max_depth: int, max_branch: int | None = None) -> DPTable:
    """Run the DP for trees of up to budget + 1 nodes and depth <= max_depth."""
    k = check_sequoia(profile, budget, max_depth, max_branch)
    max_depth = min(max_depth, budget)  # levels past the budget hold no node: the table is the same
    m_max = budget + 1
    probs = profile.matrix(max_depth, k)  # probs[delta, r]: rank r+1 child at depth delta+1
    g = [None] * (max_depth + 1)
    g[max_depth] = np.full(m_max + 1, _NEG)
    g[max_depth][1] = 1.0
    n_children = [None] * (max_depth + 1)
    n_children[max_depth] = np.zeros(m_max + 1, dtype=np.int16)
    split = [None] * (max_depth + 1)
    for delta in range(max_depth - 1, -1, -1):
        h = np.full(m_max, _NEG)
        h[0] = 0.0
        best, best_b = h.copy(), np.zeros(m_max, dtype=np.int16)
        below = g[delta + 1][:m_max]
        splits = []
        for b in range(k):
            with np.errstate(invalid="ignore"):  # 0 x -inf for infeasible sizes, replaced below
                child = np.where(np.isfinite(below), probs[delta, b] * below, _NEG)
            h, arg = _maxplus(h, child)  # H_b from H_{b-1}
            splits.append(arg)
            better = h > best
            best, best_b = np.where(better, h, best), np.where(better, b + 1, best_b)
        g[delta] = np.concatenate([[_NEG], 1.0 + best])
        n_children[delta] = np.concatenate([[0], best_b]).astype(np.int16)
        split[delta] = splits
    return DPTable(g[0], g, n_children, split)


def dp_tree(table: DPTable, nodes: int) -> TreeSpec:
    """Rebuild the optimal tree with exactly `nodes` nodes (root included) from a DP table."""
    if not np.isfinite(table.best[nodes]):
        raise InputError(f"tree: no tree of {nodes} nodes fits the depth limit")
    parents, ranks = [-1], [0]
    stack = [(0, 0, nodes)]  # (node index, depth, subtree nodes)
    while stack:
        index, delta, m = stack.pop()
        remaining = m - 1
        sizes = []
        for b in range(int(table.n_children[delta][m]), 0, -1):
            y = int(table.split[delta][b - 1][remaining])
            sizes.append((b - 1, y))
            remaining -= y
        for rank, y in reversed(sizes):
            parents.append(index)
            ranks.append(rank)
            stack.append((len(parents) - 1, delta + 1, y))
    return _canonical(parents, ranks)


def _canonical(parents: list[int], ranks: list[int]) -> TreeSpec:
    """Re-index a tree in level order (ancestors first, siblings by rank)."""
    depth = [0] * len(parents)
    paths: list[tuple[int, ...]] = [()] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
        paths[i] = paths[parents[i]] + (ranks[i],)
    order = sorted(range(len(parents)), key=lambda i: (depth[i], paths[i]))
    new_index = {old: new for new, old in enumerate(order)}
    return TreeSpec(tuple(-1 if i == 0 else new_index[parents[i]] for i in order), tuple(ranks[i] for i in order))


def greedy_tree(profile: AcceptanceProfile, budget: int, max_depth: int, max_width: int | None = None) -> TreeSpec:
    """Grow a tree by decreasing path probability, at most `max_width` nodes per level."""
    _check(budget, max_depth)
    max_depth = min(max_depth, budget)  # no node lies deeper: the same tree
    k = _ranks(profile)
    probs = profile.matrix(max_depth, k)
    cap = max_width or budget
    parents, ranks, scores = [-1], [0], [1.0]
    width = [0] * (max_depth + 1)
    heap = [(-probs[0, 0], 1, 0, 0)]  # (-f, depth, parent, rank): ties go to shallow, early nodes
    while heap and len(parents) <= budget:
        neg, depth, parent, rank = heapq.heappop(heap)
        if width[depth] >= cap:
            continue  # the level is full: neither this node nor its younger siblings fit
        parents.append(parent)
        ranks.append(rank)
        scores.append(-neg)
        width[depth] += 1
        if rank + 1 < k:
            heapq.heappush(heap, (-scores[parent] * probs[depth - 1, rank + 1], depth, parent, rank + 1))
        if depth < max_depth:
            heapq.heappush(heap, (neg * probs[depth, 0], depth + 1, len(parents) - 1, 0))
    return _canonical(parents, ranks)


def _monotone(profile: AcceptanceProfile) -> bool:
    rows = profile.depth_rank or (profile.rank_probs,)
    return all(all(a >= b for a, b in zip(row, row[1:])) for row in rows)


class OptimalTree(NamedTuple):
    tree: TreeSpec
    expected_tokens: float
    method: str  # "sequoia-dp" or "greedy-capped"


def optimal_tree(profile: AcceptanceProfile, budget: int, max_depth: int,
                 max_width: int | None = None) -> OptimalTree:
    """The tree of at most `budget` draft tokens, depth <= max_depth and <= max_width per level
    that maximises F(T). Exact: the DP without a cap; the greedy with one (exact for P
    non-increasing in rank; for other P the greedy follows rank order and is a heuristic)."""
    if max_width is None or max_width >= budget:
        table = sequoia_dp(profile, budget, max_depth)
        nodes = int(np.nanargmax(np.where(np.isfinite(table.best), table.best, -1.0)))
        tree = dp_tree(table, nodes)
        return OptimalTree(tree, expected_tokens(tree, profile), "sequoia-dp")
    tree = greedy_tree(profile, budget, max_depth, max_width)
    return OptimalTree(tree, expected_tokens(tree, profile), "greedy-capped" if _monotone(profile) else "greedy-heuristic")


class HardwareChoice(NamedTuple):
    """The tree maximising F(T) / t_round(T), and the grid it was chosen from."""

    tree: TreeSpec
    expected_tokens: float
    round_time_s: float
    tokens_per_s: float
    grid: list  # (budget, depth, F, t_round_s) for every candidate evaluated


def best_tree_for_round_time(profile: AcceptanceProfile, round_time_s: Callable[[TreeSpec], float],
                             max_budget: int, max_depth: int, max_width: int | None = None) -> HardwareChoice:
    """Maximise expected tokens per second F(T) / t_round(T) over budgets and depth limits.

    For every depth limit d and budget n the F-optimal tree is a candidate (DP or capped greedy);
    `round_time_s(tree)` is any round-time function: the heterogeneous schedule of the pipeline
    model plugs in here. Candidates equal to a smaller one are skipped.
    """
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    grid, best = [], None
    for depth in range(1, max_depth + 1):
        table = None if max_width else sequoia_dp(profile, max_budget, depth)
        for budget in range(1, max_budget + 1):
            if table is not None:
                if not np.isfinite(table.best[budget + 1]):
                    continue
                tree = dp_tree(table, budget + 1)
            else:
                tree = greedy_tree(profile, budget, depth, max_width)
            key = (tree.parents, tree.ranks)
            if key in seen:
                continue
            seen.add(key)
            f, t = expected_tokens(tree, profile), float(round_time_s(tree))
            grid.append((tree.budget, tree.depth, f, t))
            if best is None or f / t > best.tokens_per_s * (1 + 1e-12):
                best = HardwareChoice(tree, f, t, f / t, grid)
    return best._replace(grid=grid)


def _check(budget: int, max_depth: int) -> None:
    if budget < 1 or max_depth < 1:
        raise InputError(f"tree: budget ({budget}) and depth ({max_depth}) must be >= 1")
    if budget > MAX_TREE_TOKENS:
        raise InputError(f"tree: budget {budget} is past {MAX_TREE_TOKENS} draft tokens")
    if min(max_depth, budget) > MAX_TREE_DEPTH:
        raise InputError(f"tree: depth {min(max_depth, budget)} is past {MAX_TREE_DEPTH} levels")
