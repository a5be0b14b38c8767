"""Frozen specifications of serving under load (docs/serving.md): request lengths, a workload, and
how an engine batches (continuous batching with a max batch, chunked prefill, a speculation cutoff)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dfvg_dse.specs.hardware import SpecError

LENGTH_KINDS = ("fixed", "lognormal", "quantiles", "empirical")
MAX_TOKENS = 10**7  # a prompt or output past ten million tokens is a typo, not a request


@dataclass(frozen=True)
class LengthDistribution:
    """Tokens of a request's prompt or output.

    `fixed`: always `mean`. `lognormal`: the law with this mean and median (sigma^2 = 2 ln(mean /
    median)), rounded to whole tokens and clipped to [minimum, maximum]. `empirical`: draws from
    `values` (a user's trace) with replacement.
    """

    kind: str
    mean: float
    median: float = 0.0
    minimum: int = 1
    maximum: int = MAX_TOKENS
    values: tuple[int, ...] = ()
    probabilities: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise SpecError("kind", self.kind, f"allowed: {', '.join(LENGTH_KINDS)}")
        if not (isinstance(self.minimum, int) and isinstance(self.maximum, int) and 1 <= self.minimum <= self.maximum
                <= MAX_TOKENS):
            raise SpecError("minimum/maximum", [self.minimum, self.maximum], f"need 1 <= minimum <= maximum <= {MAX_TOKENS:,}")
        if self.kind == "empirical":
            if not self.values or any(not (isinstance(v, int) and 1 <= v <= MAX_TOKENS) for v in self.values):
                raise SpecError("values", list(self.values[:3]), f"need at least one length, each 1..{MAX_TOKENS:,}")
            return
        if self.kind == "quantiles":
            p, v = np.asarray(self.probabilities, dtype=float), np.asarray(self.values, dtype=float)
            if len(p) < 2 or len(p) != len(v) or p[0] != 0.0 or p[-1] != 1.0 or np.any(np.diff(p) <= 0):
                raise SpecError("probabilities", list(self.probabilities), "must rise strictly from 0 to 1, one per "
                                                                            "value in tokens")
            if np.any(v < 1) or np.any(np.diff(v) < 0) or v[-1] > MAX_TOKENS:
                raise SpecError("tokens", list(self.values), f"must be non-decreasing lengths in 1..{MAX_TOKENS:,}")
        if self.kind == "fixed" and not (math.isfinite(self.mean) and float(self.mean).is_integer()):
            raise SpecError("mean", self.mean, "a fixed length is a whole number of tokens")
        if not (math.isfinite(self.mean) and self.minimum <= self.mean <= self.maximum):
            raise SpecError("mean", self.mean, f"must lie in [{self.minimum}, {self.maximum}]")
        if self.kind == "lognormal" and not (math.isfinite(self.median) and 0 < self.median <= self.mean):
            raise SpecError("median", self.median, f"must be in (0, mean = {self.mean:g}] (a lognormal's median is below "
                                                   "its mean)")

    @property
    def sigma(self) -> float:
        """The lognormal's shape: sigma^2 = 2 ln(mean / median)."""
        return math.sqrt(2.0 * math.log(self.mean / self.median)) if self.kind == "lognormal" else 0.0

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n lengths, whole tokens (int64)."""
        if self.kind == "fixed":
            return np.full(n, int(round(self.mean)), dtype=np.int64)
        if self.kind == "empirical":
            return np.asarray(self.values, dtype=np.int64)[rng.integers(0, len(self.values), n)]
        if self.kind == "quantiles":
            return np.maximum(1, np.rint(np.interp(rng.random(n), self.probabilities, self.values))).astype(np.int64)
        draws = rng.lognormal(math.log(self.median), self.sigma, n)
        return np.clip(np.rint(draws), self.minimum, self.maximum).astype(np.int64)

    def expected(self) -> float:
        """The mean of what `sample` draws (before rounding, and before clipping for a lognormal)."""
        if self.kind == "empirical":
            return float(np.mean(self.values))
        if self.kind == "quantiles":  # the inverse CDF is linear on each interval: the trapezoid rule is exact
            p, v = np.asarray(self.probabilities), np.asarray(self.values, dtype=float)
            return float(np.sum(np.diff(p) * (v[1:] + v[:-1]) / 2))
        return float(self.mean)

    @property
    def largest(self) -> int:
        """The longest length a draw can give."""
        if self.kind in ("empirical", "quantiles"):
            return int(max(self.values))
        return int(round(self.mean)) if self.kind == "fixed" else self.maximum


@dataclass(frozen=True)
class Workload:
    """Requests: prompt and output lengths, independent, and where their shape comes from. A trace
    may also fix each request's arrival (`arrivals_s`, ascending) and lengths in order (`paired`)."""

    name: str
    prompt: LengthDistribution
    output: LengthDistribution
    source: str = ""
    arrivals_s: tuple[float, ...] = ()
    paired: bool = False  # empirical prompt and output values are one request's, in order

    def __post_init__(self) -> None:
        if self.paired and not (self.prompt.kind == self.output.kind == "empirical"
                                and len(self.prompt.values) == len(self.output.values)):
            raise SpecError("paired", self.paired, "needs empirical prompt and output lengths of equal count")
        times = np.asarray(self.arrivals_s, dtype=float)
        if times.size and (not np.all(np.isfinite(times)) or np.any(times < 0) or np.any(np.diff(times) < 0)):
            raise SpecError("arrivals_s", list(self.arrivals_s[:3]), "must be finite times >= 0 in ascending order")
        if times.size and times.size != len(self.prompt.values):
            raise SpecError("arrivals_s", f"{times.size} times", f"needs one per request ({len(self.prompt.values)})")


@dataclass(frozen=True)
class BatchingSpec:
    """How the engine schedules (docs/serving.md, "The engine's loop").

    Continuous batching: at most `max_batch` sequences decode together; a request is admitted when
    a slot is free and the verifier's KV cache holds its prompt and its whole output
    (`kv_fraction` of the memory left after the weights, as vLLM's gpu_memory_utilization).
    `chunk_tokens` > 0: chunked prefill, each iteration's forward carries at most that many tokens,
    decodes first; 0: a waiting prompt is prefilled by itself before the decodes resume.
    Speculation runs while the decoding batch is at most `speculate_max_batch` (0: any batch) and
    the design is feasible at that batch (the draft device's own batch and KV limits); above, the
    iteration decodes autoregressively, as engines switch speculation off.
    """

    max_batch: int = 256  # vLLM's max_num_seqs on GPUs under 70 GiB (engine_batching: by device)
    chunk_tokens: int = 2048
    speculate_max_batch: int = 0
    kv_fraction: float = 0.9

    def __post_init__(self) -> None:
        for name, low in (("max_batch", 1), ("chunk_tokens", 0), ("speculate_max_batch", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SpecError(name, value, f"must be an integer >= {low}")
        if not (isinstance(self.kv_fraction, (int, float)) and 0 < self.kv_fraction <= 1):
            raise SpecError("kv_fraction", self.kv_fraction, "must be in (0, 1]")


GIB = 2**30
# vLLM 0.33.0's online-server defaults (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, the
# OPENAI_API_SERVER context): (max_num_seqs, max_num_batched_tokens) by the GPU's memory, A100s kept on
# the small tier (PR #17885: a large budget cost them throughput); CPUs 128 and 2,048 per process.
ENGINE_BATCHING = ((160 * GIB, 1024, 16384), (70 * GIB, 1024, 8192), (0, 256, 2048))
CPU_BATCHING = (128, 2048)


def engine_batching(device, kv_fraction: float = 0.9, speculate_max_batch: int = 0,
                    max_batch: int | None = None, chunk_tokens: int | None = None) -> BatchingSpec:
    """The batching a vLLM server picks on `device` (one GPU of a group counts), with any given value kept."""
    unit = device.parallel.unit if getattr(device, "parallel", None) is not None else device
    if unit.kind == "cpu":
        seqs, tokens = CPU_BATCHING
    else:
        memory = unit.memory_capacity_bytes
        small = "a100" in unit.name.lower()
        seqs, tokens = next((s, t) for floor, s, t in ENGINE_BATCHING
                            if memory >= floor and not (small and floor > 0))
    return BatchingSpec(max_batch or seqs, tokens if chunk_tokens is None else chunk_tokens, speculate_max_batch,
                        kv_fraction)


@dataclass(frozen=True)
class LoadSpec:
    """Traffic: Poisson arrivals at `rate_per_s` over `duration_s` (or a trace's arrivals), and
    the latency targets that define goodput (a request counts when it meets both)."""

    rate_per_s: float
    duration_s: float = 60.0
    slo_ttft_s: float = math.inf
    slo_tpot_s: float = math.inf
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_per_s) and self.rate_per_s > 0):
            raise SpecError("rate_per_s", self.rate_per_s, "must be a positive number of requests per second")
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise SpecError("duration_s", self.duration_s, "must be a positive number of seconds")
        for name in ("slo_ttft_s", "slo_tpot_s"):
            if not getattr(self, name) > 0:
                raise SpecError(name, getattr(self, name), "must be a positive number of seconds")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise SpecError("seed", self.seed, "must be an integer >= 0")


@dataclass(frozen=True)
class ServingSetup:
    """The load a search prices its designs under (`search --rate`, docs/serving.md): a design must
    keep `min_attainment` of its requests within both SLOs."""

    workload: Workload
    load: LoadSpec
    batching: BatchingSpec | None = None  # None: each verifier's engine defaults (engine_batching)
    min_attainment: float = 0.9

    def __post_init__(self) -> None:
        if not 0 < self.min_attainment <= 1:
            raise SpecError("min_attainment", self.min_attainment, "must be in (0, 1]")
