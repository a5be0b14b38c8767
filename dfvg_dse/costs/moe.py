"""Mixture-of-experts routing (issue 17): how many distinct experts a forward touches.

A forward of n new tokens for each of b sequences routes N = n x b tokens; each picks k of the E
routed experts of a layer. If expert i is among a token's k with probability q_i (sum q_i = k,
q_i <= 1), and tokens route independently, expert i is touched with probability
1 - (1 - q_i)^N, so the expected number of distinct experts is sum_i 1 - (1 - q_i)^N (linearity of
expectation; any per-token scheme with these marginals gives the same mean). Uniform routing has
q_i = k / E: E (1 - (1 - k/E)^N). A skew s >= 0 makes expert popularity Zipf-like, w_i = i^-s,
and q_i = k w_i / sum w, capped at 1 with the excess spread over the others (water-filling).
Only the touched experts' weights stream from memory, which is why verifying k tokens of a
fine-grained MoE costs almost k times one token's weight traffic.

Under expert parallelism over R GPUs (experts placed round robin: GPU r holds experts r, r + R, ...)
the layer waits for its busiest GPU. Treating experts as touched independently, GPU r's count is a
sum of Bernoulli(1 - (1 - q_i)^N) over its experts (a Poisson binomial, computed exactly), and with
the GPUs independent E[max_r X_r] = sum_t>=1 1 - prod_r P(X_r < t). Per-token routing picks k
distinct experts, which makes the counts slightly negatively correlated; Monte Carlo of that
routing checks the approximation (tests/costs/test_moe_routing.py).
"""

from __future__ import annotations

import numpy as np

from dfvg_dse.specs import MoeSpec


def inclusion_probabilities(moe: MoeSpec) -> np.ndarray:
    """q_i: the probability that one token routes to expert i (sum k, each at most 1)."""
    weights = np.arange(1, moe.n_experts + 1, dtype=float) ** -float(moe.routing_skew)
    q = np.zeros(moe.n_experts)
    free = np.ones(moe.n_experts, dtype=bool)
    budget = float(moe.experts_per_token)
    while True:  # water-filling: experts above 1 are capped and their excess goes to the rest
        share = budget * weights * free / weights[free].sum()
        over = free & (share >= 1.0)
        if not over.any():
            return np.where(free, share, q)
        q[over], free[over] = 1.0, False
        budget = moe.experts_per_token - q.sum()


def _touched_probabilities(moe: MoeSpec, routed_tokens) -> np.ndarray:
    """P(expert i is touched) for N routed tokens: 1 - (1 - q_i)^N, shape (E, *shape of N)."""
    return 1.0 - np.power.outer(1.0 - inclusion_probabilities(moe), np.asarray(routed_tokens, dtype=float))


def expected_distinct_experts(moe: MoeSpec, routed_tokens) -> np.ndarray:
    """Expected distinct routed experts one MoE layer touches for `routed_tokens` tokens (broadcasts)."""
    return _touched_probabilities(moe, routed_tokens).sum(axis=0)


def _poisson_binomial_cdf(p: np.ndarray) -> np.ndarray:
    """P(X <= t) for X a sum of independent Bernoulli(p_j) along axis 0: shape (m + 1, *rest)."""
    pmf = np.zeros((p.shape[0] + 1,) + p.shape[1:])
    pmf[0] = 1.0
    for j, pj in enumerate(p):  # add one Bernoulli at a time
        pmf[1:j + 2] = pmf[1:j + 2] * (1.0 - pj) + pmf[:j + 1] * pj
        pmf[0] = pmf[0] * (1.0 - pj)
    return np.cumsum(pmf, axis=0)


def expected_busiest_rank_experts(moe: MoeSpec, routed_tokens) -> np.ndarray:
    """Expected distinct experts on the busiest of `moe.ep_ranks` GPUs (round-robin placement);
    the layer's distinct experts when the experts are not spread (ep_ranks 1)."""
    if moe.ep_ranks == 1:
        return expected_distinct_experts(moe, routed_tokens)
    n = np.asarray(routed_tokens, dtype=float)
    unique, inverse = np.unique(n, return_inverse=True)  # grids repeat values; the DP runs once per value
    touched = _touched_probabilities(moe, unique)  # (E, U)
    below = np.ones((moe.experts_per_rank, unique.size))  # prod_r P(X_r < t) for t = 1..m
    for rank in range(moe.ep_ranks):
        below = below * _poisson_binomial_cdf(touched[rank::moe.ep_ranks])[:-1]
    return (1.0 - below).sum(axis=0)[inverse].reshape(n.shape)
