"""What users read off a serving run (docs/serving.md, "Metrics").

TTFT: arrival to first token (the last prompt chunk's forward). TPOT: (finish - first token) /
(output - 1), per request of two tokens or more. ITL: the gap between successive emissions of a
decoding sequence (a speculative round emits several tokens at once; a prefill or a token budget that
holds a sequence back lengthens its gap), one sample per emission. Throughput and goodput: output
tokens (or requests) per second of the run, from the first arrival at 0 to the last finish; goodput
counts only the requests that meet both SLOs (DistServe), and the SLO attainment is their share of
all requests (a request refused as larger than the KV cache misses). Utilisation: busy time over the
run. A run that drew no request has no latency, attainment or energy per token (None).
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
    rejected_requests: int  # each alone needs more KV cache than the verifier holds
    rate_per_s: float  # offered: requests over the arrival window
    duration_s: float  # the run: to the last finish
    ttft_s: dict  # {"mean", "p50", "p90", "p99"}
    tpot_s: dict
    itl_s: dict
    e2e_s: dict
    throughput_tokens_per_s: float
    throughput_requests_per_s: float
    goodput_requests_per_s: float
    goodput_tokens_per_s: float
    good_output_tokens: float  # of the requests within both SLOs
    slo_attainment: float | None  # share of requests meeting both SLOs
    verify_utilisation: float
    draft_utilisation: float
    speculative_share: float  # of decoding iterations
    mean_decode_batch: float  # over decoding time
    j_per_token: float | None
    usd_per_mtoken: float | None


def _summary(values: np.ndarray) -> dict:
    """Mean and percentiles (numpy's default, linear), or None for each when there are no values."""
    if values.size == 0:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    return {"mean": float(values.mean()), **{f"p{q}": float(np.percentile(values, q)) for q in PERCENTILES}}


def serving_metrics(outcome: Outcome, costs: IterationCosts, load: LoadSpec) -> ServingMetrics:
    """The metrics of one run (module docstring)."""
    arrival, _, output = outcome.requests
    n = len(arrival)
    served = ~outcome.rejected
    ttft = (outcome.first_token_s - arrival)[served]
    many = served & (output > 1)
    tpot_all = np.where(many, (outcome.finish_s - outcome.first_token_s) / np.maximum(output - 1, 1), 0.0)
    met = served & ((outcome.first_token_s - arrival) <= load.slo_ttft_s) & (tpot_all <= load.slo_tpot_s)
    duration = max(outcome.end_s, float(arrival[-1]) if n else 0.0, 1e-12)
    tokens = float(output[served].sum())
    window = float(load.duration_s) if not n or arrival[-1] < load.duration_s else float(arrival[-1])
    good = float(output[met].sum())
    return ServingMetrics(
        requests=n, rejected_requests=int(outcome.rejected.sum()), rate_per_s=n / window, duration_s=duration,
        ttft_s=_summary(ttft), tpot_s=_summary(tpot_all[many]), itl_s=_summary(outcome.itl_s),
        e2e_s=_summary((outcome.finish_s - arrival)[served]), throughput_tokens_per_s=tokens / duration,
        throughput_requests_per_s=float(served.sum()) / duration, goodput_requests_per_s=float(met.sum()) / duration,
        goodput_tokens_per_s=good / duration, good_output_tokens=good,
        slo_attainment=float(met.mean()) if n else None,
        verify_utilisation=min(1.0, outcome.verify_busy_s / duration),
        draft_utilisation=min(1.0, outcome.draft_busy_s / duration),
        speculative_share=outcome.speculative_iterations / outcome.decode_iterations if outcome.decode_iterations else 0.0,
        mean_decode_batch=outcome.decode_batch_s / outcome.decode_s if outcome.decode_s > 0 else 0.0,
        j_per_token=outcome.energy_j / tokens if tokens else None,
        usd_per_mtoken=None if costs.price_usd_per_s is None or not tokens else
        costs.price_usd_per_s * duration / tokens * 1e6)
