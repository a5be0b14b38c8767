"""Verification rules and the acceptance they imply, computed exactly from P (target) and Q (draft).

- Single token (Leviathan): accept x ~ Q with prob min(1, P(x)/Q(x)); beta = sum min(P, Q).
- SpecInfer multi-candidate (Miao et al., ASPLOS 2024): K candidates drawn from Q *with*
  replacement; after a rejection R <- norm(max(R - Q, 0)); if all K fail, sample from R.
- Sequoia (Chen et al., NeurIPS 2024, Alg. 2): *without* replacement; after rejecting s,
  R <- norm(max(R - D, 0)), D[s] <- 0 and D renormalised (uniform over the tokens not yet rejected
  when D empties).
- Greedy: the candidate equal to argmax P is accepted.

`*_acceptance` returns the probability that the k-th candidate is the accepted one (p_k, the
Sequoia rank vector for this P and Q); `*_output` the exact distribution of the emitted token,
which must equal P (lossless). Both enumerate every branch of the sampling, so they are exact
and meant for small vocabularies.
"""

from __future__ import annotations

import numpy as np

_EPS = 1e-15


def _norm(x: np.ndarray) -> np.ndarray:
    total = x.sum()
    return x / total if total > _EPS else np.zeros_like(x)


def single_token_acceptance(p, q) -> float:
    """beta = sum_x min(P(x), Q(x)) = 1 - total variation distance."""
    return float(np.minimum(np.asarray(p, dtype=float), np.asarray(q, dtype=float)).sum())


def specinfer_acceptance(p, q, k: int) -> np.ndarray:
    """p_j for j = 1..k under SpecInfer's rule (with replacement); shape (k,)."""
    return _specinfer(np.asarray(p, float), np.asarray(q, float), k)[0]


def specinfer_output(p, q, k: int) -> np.ndarray:
    """Exact distribution of the emitted token under SpecInfer's rule; equals P."""
    return _specinfer(np.asarray(p, float), np.asarray(q, float), k)[1]


def _specinfer(p: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    residual, reach = p.copy(), 1.0
    accept, out = np.zeros(k), np.zeros_like(p)
    for j in range(k):
        # the rejection update does not depend on which token was drawn, so one path covers all
        taken = np.minimum(q, residual)  # prob of drawing x and keeping it
        accept[j] = reach * taken.sum()
        out += reach * taken
        reach *= 1.0 - taken.sum()
        residual = _norm(np.maximum(residual - q, 0.0))
    return accept, out + reach * residual


def sequoia_acceptance(p, q, k: int) -> np.ndarray:
    """p_j for j = 1..k under Sequoia's rule (without replacement); shape (k,)."""
    return _sequoia(np.asarray(p, float), np.asarray(q, float), k)[0]


def sequoia_output(p, q, k: int) -> np.ndarray:
    """Exact distribution of the emitted token under Sequoia's rule; equals P."""
    return _sequoia(np.asarray(p, float), np.asarray(q, float), k)[1]


def _sequoia(p: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    accept, out = np.zeros(k), np.zeros_like(p)

    def branch(residual: np.ndarray, draft: np.ndarray, rejected: np.ndarray, j: int, reach: float) -> None:
        if reach < _EPS:
            return
        if j == k:
            out[:] += reach * residual
            return
        next_residual = _norm(np.maximum(residual - draft, 0.0))
        for s in np.flatnonzero(draft > _EPS):
            keep = min(1.0, residual[s] / draft[s])
            accept[j] += reach * draft[s] * keep
            out[s] += reach * draft[s] * keep
            now_rejected = rejected.copy()
            now_rejected[s] = True
            next_draft = draft.copy()
            next_draft[s] = 0.0
            if next_draft.sum() <= _EPS:  # Sequoia: uniform over the tokens not yet rejected
                next_draft = (~now_rejected).astype(float)
            branch(next_residual, _norm(next_draft), now_rejected, j + 1, reach * draft[s] * (1.0 - keep))

    branch(p.copy(), _norm(q.copy()), np.zeros(len(p), dtype=bool), 0, 1.0)
    return accept, out


def greedy_acceptance(p, q, k: int) -> np.ndarray:
    """p_j when the draft proposes its top-k tokens and the target accepts argmax P: one-hot or zero."""
    order = np.argsort(-np.asarray(q, dtype=float), kind="stable")[:k]
    return (order == int(np.argmax(p))).astype(float)
