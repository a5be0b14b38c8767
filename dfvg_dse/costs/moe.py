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


def expected_distinct_experts(moe: MoeSpec, routed_tokens) -> np.ndarray:
    """Expected distinct routed experts one MoE layer touches for `routed_tokens` tokens (broadcasts)."""
    n = np.asarray(routed_tokens, dtype=float)
    q = inclusion_probabilities(moe)
    untouched = np.power.outer(1.0 - q, n)  # (E, *shape)
    return moe.n_experts - untouched.sum(axis=0)
