"""Fit acceptance profiles from traces of real rounds (docs/acceptance-and-trees.md; docs/trace-format.md).

A round is a drafted tree (parents, ranks, draft confidences) and the accepted path (node indices
from the root). Estimators:
- rank vector: p_r = (rounds where an accepted node's rank-r child was accepted) / (accepted nodes
  that had a rank-r child). A node without that child says nothing about rank r (censoring), so
  trees of any shape can be pooled. Leaves of the drafted tree are censored entirely.
- depth x rank: the same, per depth of the child.
- confidence model: per depth the mean top-1 confidence, one Beta concentration by the method of
  moments, tail shares as mean q_r / (1 - q_1); calibration P(accept | q) by isotonic regression
  (scipy) on the children of accepted nodes, stored as at most 16 knots.
- bootstrap: resampling whole rounds (seeded) gives percentile intervals of the rank vector.
Every estimate held at a bound of its range (a rank vector summing past 1, a concentration or a
top-1 mean clipped) is named in FitResult.warnings: the stored value is the bound, not the estimate.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
from scipy.optimize import isotonic_regression

from dfvg_dse.specs import AcceptanceProfile, ConfidenceModel, InputError


CONCENTRATION_RANGE = (0.05, 1e4)  # Beta concentration of the top-1 confidence: kept finite and positive
# Bootstrap limits: percentile intervals settle by 1,000-2,000 resamples (Efron and Tibshirani, An
# Introduction to the Bootstrap, 1993); one multinomial draw per resample and round costs about 60 ns here.
MAX_BOOTSTRAP = 10_000  # resamples (acceptance fit --bootstrap)
MAX_BOOTSTRAP_DRAWS = 5e8  # resamples x rounds: about 30 s on the 2-core dev machine
BOOTSTRAP_CHUNK_CELLS = 1 << 22  # resample weights (resamples x rounds) held at once: 32 MB


class TraceRound(NamedTuple):
    """One verification round of a trace."""

    parents: tuple[int, ...]
    ranks: tuple[int, ...]
    confidences: tuple[float, ...]
    accepted: tuple[int, ...]  # node indices on the accepted path, root (0) first


def _whole(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_round(raw: dict, line: int | str) -> TraceRound:
    """Validate one decoded JSON line; InputError names the line (a number, or "PATH:LINE") and the field.
    Trace files are checked field by field when read (Catalog.read_trace); this is the same rule for
    rounds built in memory (the reference decoder's)."""
    where = line if isinstance(line, str) else f"trace line {line}"
    if not all(isinstance(raw.get(f), list) for f in ("parents", "ranks", "accepted")):
        raise InputError(f"{where}: needs parents, ranks, accepted (and confidences), each a list")
    parents, ranks, accepted = list(raw["parents"]), list(raw["ranks"]), list(raw["accepted"])
    confidences = raw.get("confidences", [1.0] * len(parents))
    if not isinstance(confidences, list) or not all(_whole(q) or isinstance(q, float) for q in confidences):
        raise InputError(f"{where}: confidences must be a list of numbers")
    n = len(parents)
    if not n or parents[0] != -1 or len(ranks) != n or len(confidences) != n:
        raise InputError(f"{where}: parents, ranks and confidences need one entry per node, root first")
    if any(not (_whole(p) and 0 <= p < i) for i, p in enumerate(parents[1:], 1)):
        raise InputError(f"{where}: parents must point to earlier nodes (ancestors first)")
    # A negative rank would index the last rank's counts; two siblings of one rank are one token twice.
    if any(not (_whole(r) and r >= 0) for r in ranks) or len(set(zip(parents[1:], ranks[1:]))) < n - 1:
        raise InputError(f"{where}: ranks must be integers >= 0, distinct among siblings")
    if not accepted or accepted[0] != 0 or any(
            not (_whole(a) and 0 < a < n and parents[a] == b) for b, a in zip(accepted, accepted[1:])):
        raise InputError(f"{where}: accepted must be a root-first path of node indices")
    if any(not 0.0 <= q <= 1.0 for q in confidences[1:]):
        raise InputError(f"{where}: confidences must lie in [0, 1]")
    return TraceRound(tuple(parents), tuple(ranks), tuple(float(q) for q in confidences), tuple(accepted))


def _children(r: TraceRound) -> dict[int, dict[int, int]]:
    kids: dict[int, dict[int, int]] = {}
    for i in range(1, len(r.parents)):
        kids.setdefault(r.parents[i], {})[r.ranks[i]] = i
    return kids


def _depths(r: TraceRound) -> list[int]:
    depth = [0] * len(r.parents)
    for i in range(1, len(r.parents)):
        depth[i] = depth[r.parents[i]] + 1
    return depth


def rank_counts(rounds: Sequence[TraceRound], ranks: int, depths: int) -> tuple[np.ndarray, np.ndarray]:
    """hits and exposures per round, depth (of the child) and rank: arrays (rounds, depths, ranks)."""
    hits = np.zeros((len(rounds), depths, ranks))
    exposed = np.zeros((len(rounds), depths, ranks))
    for i, r in enumerate(rounds):
        kids, depth = _children(r), _depths(r)
        for step, node in enumerate(r.accepted):
            children = kids.get(node, {})
            d = min(depth[node], depths - 1)  # the child's depth is depth[node] + 1; row index depth[node]
            for rank in children:
                if rank < ranks:
                    exposed[i, d, rank] += 1
            if step + 1 < len(r.accepted):
                rank = r.ranks[r.accepted[step + 1]]
                if rank < ranks:
                    hits[i, d, rank] += 1
    return hits, exposed


def _ratio(hits: np.ndarray, exposed: np.ndarray) -> np.ndarray:
    return np.divide(hits, exposed, out=np.zeros_like(hits, dtype=float), where=exposed > 0)


def _confidence_model(rounds: Sequence[TraceRound], ranks: int,
                      depths: int) -> tuple[ConfidenceModel | None, list[str]]:
    top1: list[list[float]] = [[] for _ in range(depths)]
    tails: list[list[float]] = [[] for _ in range(ranks - 1)]
    q_seen, accepted_seen = [], []
    for r in rounds:
        kids, depth = _children(r), _depths(r)
        on_path = set(r.accepted)
        for node, children in kids.items():
            if 0 not in children:
                continue
            q1 = r.confidences[children[0]]
            top1[min(depth[node], depths - 1)].append(q1)
            for rank, child in children.items():
                if 1 <= rank < ranks and q1 < 1.0:
                    tails[rank - 1].append(r.confidences[child] / (1.0 - q1))
            if node in on_path:
                for child in children.values():
                    q_seen.append(r.confidences[child])
                    accepted_seen.append(1.0 if child in on_path else 0.0)
    if not top1[0] or len(q_seen) < 2:
        return None, []
    means = [float(np.mean(v)) if v else float(np.mean(top1[0])) for v in top1]
    pooled = np.concatenate([np.asarray(v) - m for v, m in zip(top1, means) if v])
    mean_all = float(np.mean(np.concatenate([np.asarray(v) for v in top1 if v])))
    variance = max(float(np.mean(pooled ** 2)), 1e-6)
    moments = mean_all * (1 - mean_all) / variance - 1.0  # moments of a Beta
    concentration = float(np.clip(moments, *CONCENTRATION_RANGE))
    warnings = []
    if concentration != moments:
        side = "lower" if concentration == CONCENTRATION_RANGE[0] else "upper"
        warnings.append(f"confidence concentration = {concentration:g} at its {side} bound (the method of moments "
                        f"gave {moments:.4g})")
    shares = [float(np.mean(v)) if v else 0.0 for v in tails]
    total = sum(shares)
    shares = [s / total for s in shares] if total > 1 else shares
    order = np.argsort(q_seen, kind="stable")
    q_sorted, y_sorted = np.asarray(q_seen)[order], np.asarray(accepted_seen)[order]
    fitted = isotonic_regression(y_sorted, increasing=True).x
    knots = np.unique(np.quantile(q_sorted, np.linspace(0, 1, 16)))
    values = np.interp(knots, q_sorted, fitted)
    clip = lambda x: float(np.clip(x, 1e-6, 1 - 1e-6))  # noqa: E731 - Beta means must stay inside (0, 1)
    clipped = [d for d, m in enumerate(means) if clip(m) != m]
    if clipped:
        warnings.append(f"confidence top-1 mean at depths {', '.join(map(str, clipped))} = "
                        f"{', '.join(f'{means[d]:g}' for d in clipped)} clipped into (1e-6, 1 - 1e-6)")
    return ConfidenceModel(top1_mean=tuple(clip(m) for m in means), concentration=concentration,
                           tail_shares=tuple(shares), calibration_q=tuple(float(k) for k in knots),
                           calibration_accept=tuple(float(v) for v in np.maximum.accumulate(values))), warnings


class FitResult(NamedTuple):
    profile: AcceptanceProfile
    ci_low: np.ndarray  # 2.5th percentile of each p_r over bootstrap resamples
    ci_high: np.ndarray
    rounds: int
    accepted_tokens_mean: float  # mean accepted draft tokens per round (bonus excluded)
    warnings: tuple[str, ...] = ()  # estimates held at a bound of their range, one line each


def _bootstrap(hits: np.ndarray, exposed: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """p_r of `resamples` resamples of whole rounds: hits, exposed (R, ranks) -> (resamples, ranks). The
    weights are drawn BOOTSTRAP_CHUNK_CELLS at a time from one stream (the same numbers as in one draw)."""
    rng = np.random.default_rng(seed)
    n = len(hits)
    step = max(1, BOOTSTRAP_CHUNK_CELLS // n)
    parts = []
    for start in range(0, resamples, step):
        weights = rng.multinomial(n, np.full(n, 1.0 / n), size=min(step, resamples - start))  # (b, R)
        parts.append(_ratio(weights @ hits, weights @ exposed))
    return np.concatenate(parts)


def fit_profile(rounds: Sequence[TraceRound], name: str, source: str, ranks: int = 16, depths: int = 16,
                bootstrap: int = 1000, seed: int = 0) -> FitResult:
    """Fit a rank vector, a depth x rank matrix and a confidence model, with bootstrap intervals."""
    if not rounds:
        raise InputError("trace: no rounds to fit")
    if (isinstance(bootstrap, bool) or not isinstance(bootstrap, (int, np.integer))
            or not 1 <= bootstrap <= MAX_BOOTSTRAP):
        raise InputError(f"bootstrap = {bootstrap!r}: resamples must be an integer in 1..{MAX_BOOTSTRAP:,}")
    if bootstrap * len(rounds) > MAX_BOOTSTRAP_DRAWS:
        raise InputError(f"bootstrap: {bootstrap:,} resamples x {len(rounds):,} rounds = {bootstrap * len(rounds):.1e} "
                         f"draws, past the {MAX_BOOTSTRAP_DRAWS:.0e} limit (about 30 s); use at most "
                         f"{int(MAX_BOOTSTRAP_DRAWS // len(rounds)):,} resamples")
    hits, exposed = rank_counts(rounds, ranks, depths)
    used_ranks = max(1, int(np.max(np.nonzero(exposed.sum(axis=(0, 1)))[0], initial=0)) + 1)
    used_depths = max(1, int(np.max(np.nonzero(exposed.sum(axis=(0, 2)))[0], initial=0)) + 1)
    hits, exposed = hits[:, :used_depths, :used_ranks], exposed[:, :used_depths, :used_ranks]
    rank_vector = _ratio(hits.sum(axis=(0, 1)), exposed.sum(axis=(0, 1)))
    matrix = _ratio(hits.sum(axis=0), exposed.sum(axis=0))
    # Exclusive events can still sum past 1 by sampling noise on small traces: rescale then.
    warnings = []
    if rank_vector.sum() > 1.0:
        warnings.append(f"rank vector sums to {rank_vector.sum():.4f} over {len(rounds)} rounds, past its bound 1: "
                        "rescaled to 1")
    rows = [d for d, total in enumerate(matrix.sum(axis=1)) if total > 1.0]
    if rows:
        warnings.append(f"depth x rank rows at depths {', '.join(str(d + 1) for d in rows)} sum to up to "
                        f"{matrix.sum(axis=1).max():.4f}, past their bound 1: rescaled to 1")
    rank_vector = rank_vector / max(1.0, rank_vector.sum())
    matrix = matrix / np.maximum(1.0, matrix.sum(axis=1, keepdims=True))
    boot = _bootstrap(hits.sum(axis=1), exposed.sum(axis=1), bootstrap, seed)  # (B, ranks)
    boot = boot / np.maximum(1.0, boot.sum(axis=1, keepdims=True))  # each resample rescaled as the estimate is
    # A percentile interval can miss its estimate on a few rounds (and the profile reader refuses one
    # that does): widened to hold it.
    ci_low = np.minimum(np.percentile(boot, 2.5, axis=0), rank_vector)
    ci_high = np.maximum(np.percentile(boot, 97.5, axis=0), rank_vector)
    confidence, confidence_warnings = _confidence_model(rounds, used_ranks, used_depths)
    profile = AcceptanceProfile(name, tuple(float(x) for x in rank_vector),
                                depth_rank=tuple(tuple(float(x) for x in row) for row in matrix),
                                confidence=confidence, source=source)
    return FitResult(profile, ci_low, ci_high, len(rounds),
                     float(np.mean([len(r.accepted) - 1 for r in rounds])),
                     tuple(f"{name}: {w}" for w in warnings + confidence_warnings))
