"""Serving under load (docs/serving.md): request arrivals, continuous batching, prefill, and goodput
under latency SLOs, on the cost and acceptance models that `estimate` uses."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.serving.costs import IterationCosts, context_grid, iteration_costs
from dfvg_dse.serving.engine import Outcome, Requests, check_iterations, check_request_count, draw_requests, run
from dfvg_dse.serving.metrics import ServingMetrics, serving_metrics
from dfvg_dse.specs import DecodeConfig
from dfvg_dse.specs.serving import BatchingSpec, LoadSpec, Workload


class ServingRun(NamedTuple):
    metrics: ServingMetrics
    outcome: Outcome


def workload_contexts(workload: Workload) -> np.ndarray:
    """The context grid a workload's sequences span: from its shortest prompt to its longest request."""
    low = int(min(workload.prompt.values)) if workload.prompt.kind in ("empirical", "quantiles") else 1
    return context_grid(low, workload.prompt.largest + workload.output.largest)


def design_costs(config: DecodeConfig, workload: Workload, batching: BatchingSpec, seed: int = 0) -> IterationCosts:
    """A design's iteration table over the contexts its workload reaches (serving.costs)."""
    return iteration_costs(config, batching, workload_contexts(workload), seed)


def serve(config: DecodeConfig, costs: IterationCosts, workload: Workload, load: LoadSpec,
          batching: BatchingSpec) -> ServingRun:
    """One run: draw the requests, serve them all, measure."""
    outcome = run(config, costs, draw_requests(workload, load), batching, load.seed)
    return ServingRun(serving_metrics(outcome, costs, load), outcome)


def first_rate_where(rates, worse) -> float | None:
    """The first rate of an ascending sweep from which `worse` holds at every later rate, or None."""
    worse = np.asarray(worse, dtype=bool)
    for i in range(len(rates)):
        if worse[i:].all():
            return float(rates[i])
    return None


__all__ = ["BatchingSpec", "IterationCosts", "LoadSpec", "Outcome", "Requests", "ServingMetrics", "ServingRun",
           "check_iterations", "check_request_count",
           "Workload", "design_costs", "draw_requests", "first_rate_where", "iteration_costs", "run", "serve",
           "serving_metrics", "workload_contexts"]
