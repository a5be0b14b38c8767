"""How tokens are chosen (issue 6): greedy or sampled (temperature, top-p), the probabilities both
stages compute, and the float16 form in which a draft distribution crosses the link."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VERIFICATIONS = ("sequoia", "specinfer")


def wire_distribution(q: np.ndarray) -> np.ndarray:
    """q as the link carries it: rounded to float16, renormalised in float64."""
    rounded = np.asarray(q, dtype=np.float16).astype(np.float64)
    return rounded / rounded.sum()


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen: temperature 0 is greedy; `verification` applies to sampled static trees."""

    temperature: float = 0.0
    top_p: float = 1.0
    verification: str = "sequoia"

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and 0 < self.top_p <= 1 and self.verification in VERIFICATIONS):
            raise ValueError(f"sampling {self}: need temperature >= 0, 0 < top_p <= 1, verification in "
                             f"{VERIFICATIONS}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = Sampling()


def distribution(logits: np.ndarray, sampling: Sampling) -> np.ndarray:
    """Float64 probabilities of softmax(logits / T) after the top-p cut: the smallest set of most
    likely tokens whose mass reaches top_p is kept (at least one token), the rest set to 0.
    Greedy (T = 0) gives the plain softmax (the draft's confidences)."""
    z = np.asarray(logits, dtype=np.float64) / (sampling.temperature or 1.0)
    p = np.exp(z - z.max())
    p /= p.sum()
    if sampling.top_p < 1:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]  # mass of the more likely tokens
        cut = np.zeros_like(p)
        cut[order[before < sampling.top_p]] = 1.0
        p = p * cut
        p /= p.sum()
    return p


def sample_token(p: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from probabilities p (their sum need not be 1)."""
    return int(min(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right"), len(p) - 1))
