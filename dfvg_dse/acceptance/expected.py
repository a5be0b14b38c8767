"""Expected tokens per round F(T) of a token tree (Sequoia, NeurIPS 2024, Prop. 3.4).

    F(T) = sum over nodes v of prod over the path root -> v (root excluded) of p_{depth, rank}

The root counts 1, so F includes the bonus/correction token. Closed forms for a chain and for k
independent sequences are given for cross-checks; `expected_tokens_many` evaluates thousands of
trees in one vectorised pass (nodes of all trees concatenated, one numpy step per depth level).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dfvg_dse.specs import AcceptanceProfile, TreeSpec


def node_scores(tree: TreeSpec, profile: AcceptanceProfile) -> np.ndarray:
    """f(v) for every node: the probability that v and all its ancestors are accepted; f(root) = 1."""
    return _scores([tree], profile)[0]


def _scores(trees: Sequence[TreeSpec], profile: AcceptanceProfile) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.array([t.n_nodes for t in trees])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    parents = np.concatenate([np.where(np.asarray(t.parents) < 0, -1, np.asarray(t.parents) + o)
                              for t, o in zip(trees, offsets)])
    ranks = np.concatenate([np.asarray(t.ranks) for t in trees])
    depths = np.concatenate([np.asarray(t.depths) for t in trees])
    max_depth = int(depths.max())
    table = profile.matrix(max(max_depth, 1), int(ranks.max()) + 1)
    f = np.ones(len(parents))
    for d in range(1, max_depth + 1):  # parents sit one level up, already final
        level = np.flatnonzero(depths == d)
        f[level] = f[parents[level]] * table[d - 1, ranks[level]]
    return f, offsets


def expected_tokens(tree: TreeSpec, profile: AcceptanceProfile) -> float:
    """F(T): expected tokens generated per verification round, bonus token included."""
    return float(node_scores(tree, profile).sum())


def expected_tokens_many(trees: Sequence[TreeSpec], profile: AcceptanceProfile) -> np.ndarray:
    """F(T) for each tree, vectorised over all nodes of all trees."""
    f, offsets = _scores(trees, profile)
    return np.add.reduceat(f, offsets)


def expected_tokens_sequences(rank_probs, k: int, length: int) -> float:
    """Closed form for k independent sequences of `length` tokens under a rank vector:
    F = 1 + (p_1 + ... + p_k) (1 - p_1^L) / (1 - p_1) (derived from Sequoia's F(T), arXiv 2402.12374, Prop 3.4)."""
    p = np.asarray(rank_probs, dtype=float)
    p1 = p[0]
    head = p[:k].sum()
    chain = length if p1 == 1.0 else (1.0 - p1 ** length) / (1.0 - p1)
    return float(1.0 + head * chain)


def expected_depth_reached(tree: TreeSpec, profile: AcceptanceProfile) -> float:
    """Expected number of accepted draft tokens (F - 1): the accepted path's length below the root."""
    return expected_tokens(tree, profile) - 1.0
