"""What users read off a serving run (docs/serving.md, "Metrics").

TTFT: arrival to first token (the last prompt chunk's forward). TPOT: (finish - first token) /
(output - 1), per request of two tokens or more. ITL: the gap between successive emissions of a
decoding sequence (an iteration; a speculative round emits several tokens at once), weighted by
the sequences that waited on it. Throughput: output tokens over the run (first arrival at 0 to
the last finish). Goodput: requests meeting both SLOs per second of arrivals (DistServe's rate of
requests that attain their SLOs: the offered rate times the attainment), and their output tokens
per second. Utilisation: busy time over the run.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.serving.costs import IterationCosts
from dfvg_dse.serving.engine import Outcome
from dfvg_dse.specs.serving import LoadSpec

PERCENTILES = (50, 90, 99)


class ServingMetrics(NamedTuple):
    requests: int
    rate_per_s: float  # offered: requests over the arrival window
    duration_s: float  # the run: to the last finish
    ttft_s: dict  # {"mean", "p50", "p90", "p99"}
    tpot_s: dict
    itl_s: dict
    e2e_s: dict
    throughput_tokens_per_s: float
    throughput_requests_per_s: float
    goodput_requests_per_s: float  # over the arrival window
    goodput_tokens_per_s: float
    slo_attainment: float  # share of requests meeting both SLOs
    verify_utilisation: float
    draft_utilisation: float
    speculative_share: float  # of decoding iterations
    mean_decode_batch: float  # over decoding time
    j_per_token: float
    usd_per_mtoken: float | None


def _summary(values: np.ndarray, weights: np.ndarray | None = None) -> dict:
    """Mean and percentiles; weighted percentiles by the inverted CDF (numpy's 'inverted_cdf')."""
    if values.size == 0:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    if weights is None:
        return {"mean": float(values.mean()), **{f"p{q}": float(np.percentile(values, q)) for q in PERCENTILES}}
    return {"mean": float(np.average(values, weights=weights)),
            **{f"p{q}": float(np.percentile(values, q, weights=weights, method="inverted_cdf")) for q in PERCENTILES}}


def serving_metrics(outcome: Outcome, costs: IterationCosts, load: LoadSpec) -> ServingMetrics:
    """The metrics of one run (module docstring)."""
    arrival, _, output = outcome.requests
    n = len(arrival)
    ttft = outcome.first_token_s - arrival
    many = output > 1
    tpot = (outcome.finish_s[many] - outcome.first_token_s[many]) / (output[many] - 1)
    e2e = outcome.finish_s - arrival
    duration = max(outcome.end_s, float(arrival[-1]) if n else 0.0, 1e-12)
    met = (ttft <= load.slo_ttft_s) & np.where(many, (outcome.finish_s - outcome.first_token_s)
                                                / np.maximum(output - 1, 1) <= load.slo_tpot_s, True)
    tokens = float(output.sum())
    window = float(load.duration_s) if not len(arrival) or arrival[-1] < load.duration_s else float(arrival[-1])
    return ServingMetrics(
        requests=n, rate_per_s=n / window, duration_s=duration,
        ttft_s=_summary(ttft), tpot_s=_summary(tpot), itl_s=_summary(outcome.gap_s, outcome.gap_count),
        e2e_s=_summary(e2e), throughput_tokens_per_s=tokens / duration, throughput_requests_per_s=n / duration,
        goodput_requests_per_s=float(met.sum()) / window, goodput_tokens_per_s=float(output[met].sum()) / window,
        slo_attainment=float(met.mean()) if n else 0.0,
        verify_utilisation=min(1.0, outcome.verify_busy_s / duration),
        draft_utilisation=min(1.0, outcome.draft_busy_s / duration),
        speculative_share=outcome.speculative_iterations / outcome.decode_iterations if outcome.decode_iterations else 0.0,
        mean_decode_batch=float(np.average(outcome.gap_count, weights=outcome.gap_s)) if outcome.gap_s.sum() > 0 else 0.0,
        j_per_token=outcome.energy_j / tokens if tokens else 0.0,
        usd_per_mtoken=None if costs.price_usd_per_s is None or not tokens else
        costs.price_usd_per_s * duration / tokens * 1e6)
