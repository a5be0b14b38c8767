"""Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding", ICML):
expected tokens of an i.i.d. chain, walltime speedup, arithmetic-ops factor and optimal length.

Notation: alpha = per-token acceptance, gamma = draft tokens per round,
c = T_draft_step / T_target_step (Leviathan's c; DFVG's c is its inverse).
"""

from __future__ import annotations

import numpy as np

# Team convention (docs/acceptance-and-trees.md, "Formulas"; Leviathan et al. give no tie rule):
# speedups within this relative tolerance are a tie, and the smallest gamma wins (fewer wasted
# draft tokens and ops).
TIE_RTOL = 1e-9


def expected_tokens_chain(alpha, gamma) -> np.ndarray:
    """Eq. 1: E = (1 - alpha^(gamma+1)) / (1 - alpha), bonus token included; alpha = 1 gives gamma + 1."""
    a = np.asarray(alpha, dtype=float)
    g = np.asarray(gamma, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 - a ** (g + 1)) / (1.0 - a)
    return np.where(a == 1.0, g + 1, e)


def speedup_chain(alpha, gamma, c) -> np.ndarray:
    """Theorem 3.8: S = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))."""
    return expected_tokens_chain(alpha, gamma) / (np.asarray(gamma, dtype=float) * np.asarray(c, dtype=float) + 1.0)


def ops_factor_chain(alpha, gamma, c_hat) -> np.ndarray:
    """Theorem 3.11: arithmetic operations relative to AR, (1 - alpha)(gamma c_hat + gamma + 1) / (1 - alpha^(gamma+1))."""
    g = np.asarray(gamma, dtype=float)
    return (g * np.asarray(c_hat, dtype=float) + g + 1.0) / expected_tokens_chain(alpha, gamma)


def optimal_gamma(alpha: float, c: float, max_gamma: int = 50) -> tuple[int, float]:
    """Integer gamma in 1..max_gamma maximising Theorem 3.8, ties to the smallest gamma.

    Returns:
        (gamma*, speedup at gamma*).
    """
    gammas = np.arange(1, max_gamma + 1)
    s = speedup_chain(alpha, gammas, c)
    best = s.max()
    first = int(np.argmax(s >= best * (1.0 - TIE_RTOL)))
    return int(gammas[first]), float(s[first])


def speedup_lower_bound_gamma1(alpha, c) -> np.ndarray:
    """Corollary 3.9: with alpha > c, gamma = 1 already gives at least (1 + alpha) / (1 + c)."""
    return (1.0 + np.asarray(alpha, dtype=float)) / (1.0 + np.asarray(c, dtype=float))
