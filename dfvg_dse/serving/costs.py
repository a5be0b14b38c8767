"""What one iteration of a continuous-batching engine costs, tabulated once per design (docs/serving.md).

A decoding iteration at batch b whose sequences hold c tokens on average costs what `estimate`
prices for that batch and context: the design's expected round (draft, link, verify, schedule) or,
with speculation off, one autoregressive step. The round's shape does not depend on b or c, so it is
computed once; its stage times and timeline are computed on a grid of batches (every integer up to
BATCH_EXACT, then steps of BATCH_RATIO) and contexts (CONTEXT_POINTS log-spaced), then interpolated
linearly to every integer batch (rows) and, per iteration, in context. Each sequence's tokens per
round are drawn from a pool sampled from the same acceptance model (a static tree walked level by
level as the simulator does, a dynamic rule's Monte Carlo rounds), so their mean is the estimate's.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from dfvg_dse.costs import device_forward_cost, memory_fit, mixed_forward_cost, processor_forward_cost
from dfvg_dse.pipeline.energy import device_energy_j, devices_price_usd_per_s, energy
from dfvg_dse.pipeline.rounds import round_shape, stage_times
from dfvg_dse.pipeline.schedule import feasibility, timeline
from dfvg_dse.sim import walk_tree
from dfvg_dse.specs import DecodeConfig, InputError
from dfvg_dse.specs.serving import BatchingSpec

BATCH_EXACT, BATCH_RATIO = 16, 1.25  # every batch up to 16, then a grid point per 25% (interpolated between)
CONTEXT_POINTS = 9
POOL_ROUNDS = 1 << 16  # draws of tokens per round per sequence


class IterationCosts(NamedTuple):
    """Per design: rows are batches 1..max_batch, columns the context grid."""

    contexts: np.ndarray  # (C,) tokens held per sequence, the grid
    spec_cycle_s: np.ndarray  # (B, C) the expected round; nan where speculation is off or infeasible
    spec_fill_tokens: np.ndarray  # (B, C) tokens per sequence the verifier decodes alone per round (DFVG's fill)
    spec_energy_j: np.ndarray  # (B, C) every device's energy over one round
    spec_draft_busy_s: np.ndarray  # (B, C) the drafter's busy time per round (0 when it shares the verifier)
    spec_verify_busy_s: np.ndarray  # (B, C) the verifier's busy time per round (drafting too when it drafts)
    ar_step_s: np.ndarray  # (B, C) one autoregressive step
    ar_energy_j: np.ndarray  # (B, C)
    verify_tokens: int  # tokens each sequence puts into the verify forward (nodes + 1), or 1 for AR
    token_pool: np.ndarray  # (POOL_ROUNDS,) tokens per round per sequence, bonus included
    expected_tokens: float  # the round shape's expected tokens per sequence
    idle_power_w: float  # every device idle
    verify_busy_w: float  # the verifier's decode and idle powers
    verify_idle_w: float
    draft_busy_w: float  # a drafter on its own device (0 when it shares the verifier, or for AR)
    draft_idle_w: float
    price_usd_per_s: float | None
    kv_capacity_tokens: float  # the verifier's KV cache, in tokens of the target
    speculative: bool
    draft_prefills: bool  # a draft model or head must fill its own cache with each prompt (a lookup does not)
    draft_on_verifier: bool  # ... on the verifier itself (its prefill adds to the forward), or on its own device
    warnings: tuple[str, ...]


def batch_grid(max_batch: int, exact: tuple[int, ...] = ()) -> np.ndarray:
    """Every batch up to BATCH_EXACT, then one per BATCH_RATIO step, max_batch itself and the batches
    `exact` (a speculation cutoff and the batch above it, so the step between them is not blurred)."""
    grid = list(range(1, min(max_batch, BATCH_EXACT) + 1))
    while grid[-1] < max_batch:
        grid.append(min(max_batch, int(np.ceil(grid[-1] * BATCH_RATIO))))
    return np.unique(np.asarray(grid + [b for b in exact if 1 <= b <= max_batch]))


def context_grid(low: int, high: int) -> np.ndarray:
    """CONTEXT_POINTS contexts, log-spaced from `low` (>= 1) to `high` tokens, whole tokens."""
    low, high = max(1, int(low)), max(int(low) + 1, int(high))
    return np.unique(np.rint(np.geomspace(low, high, CONTEXT_POINTS)).astype(np.int64))


def kv_capacity_tokens(config: DecodeConfig, batching: BatchingSpec) -> float:
    """Tokens of the target's KV cache the verifier holds: `kv_fraction` of its memory less the
    weights (and a draft's beside it on the same device), per token of cache."""
    system = config.system
    one, none = memory_fit(config.target, system.verify, 1, 1), memory_fit(config.target, system.verify, 0, 1)
    per_token = float(one.kv_cache_bytes) - float(none.kv_cache_bytes)
    weights = float(none.weight_bytes)
    if config.schedule != "ar" and system.draft.name == system.verify.name:
        draft = memory_fit(config.draft, system.verify, 1, 1, beside_target=True)
        weights += float(draft.weight_bytes)
        per_token += float(draft.kv_cache_bytes)  # the draft caches every position too
    free = none.capacity_bytes * batching.kv_fraction - weights
    if free <= 0:
        raise InputError(f"serving: the weights ({weights / 1e9:.1f} GB) leave no KV cache in {batching.kv_fraction:.0%} "
                         f"of '{system.verify.name}' ({none.capacity_bytes / 1e9:.1f} GB)")
    return free / per_token


def _token_pool(config: DecodeConfig, shape, seed: int) -> np.ndarray:
    """Tokens per round per sequence (bonus included), POOL_ROUNDS draws from the acceptance model."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
    if shape.sample_tokens is not None and len(shape.sample_tokens):
        return rng.choice(shape.sample_tokens, POOL_ROUNDS)
    tree = config.tree
    table = config.acceptance.matrix(tree.depth + 1, max(tree.ranks) + 1)
    accepted, _ = walk_tree(tree, table, POOL_ROUNDS, rng)
    return accepted + 1.0


def _mean_preserving(pool: np.ndarray, mean: float) -> np.ndarray:
    """A pool whose mean is `mean` (a trace replay's), keeping its spread: shifted and clipped to [1, max]."""
    return np.clip(pool + (mean - pool.mean()), 1.0, None)


def _spec_row(config: DecodeConfig, shape, b: int, contexts: np.ndarray, speculate: bool):
    """(cycle, fill tokens per sequence, energy, draft busy, verify busy) of the speculative round at batch b, per context."""
    out = np.full((5, len(contexts)), np.nan)
    if not speculate:
        return out
    same = config.system.draft.name == config.system.verify.name
    for j, c in enumerate(contexts):
        cfg = dataclasses.replace(config, batch=int(b), context=int(c))
        if feasibility(cfg, shape):
            continue  # the draft device's (or verifier's) memory at this batch and context: speculation off
        times = stage_times(cfg, shape)
        line = timeline(cfg, shape, times)
        power = energy(cfg, times, line)
        out[:, j] = (line.cycle_s, line.fill_tokens / b, power.draft_energy_j + power.verify_energy_j
                     + power.link_energy_j, 0.0 if same else line.draft_busy_s,
                     min(line.cycle_s, line.verify_busy_s + (line.draft_busy_s if same else 0.0)))
    return out


def _rows(grid: np.ndarray, table: np.ndarray, max_batch: int) -> np.ndarray:
    """Grid rows (batches) interpolated linearly to every batch 1..max_batch; nan where either neighbour is."""
    batches = np.arange(1, max_batch + 1)
    upper = np.searchsorted(grid, batches)  # grid[upper] >= b
    lower = np.maximum(upper - 1, 0)
    span = np.maximum(grid[upper] - grid[lower], 1)
    w = ((batches - grid[lower]) / span)[:, None]
    w = np.where(grid[upper][:, None] == batches[:, None], 1.0, w)
    return (1 - w) * table[lower] + w * table[upper]


def iteration_costs(config: DecodeConfig, batching: BatchingSpec, contexts: np.ndarray, seed: int = 0,
                    rounds: int = 20000) -> IterationCosts:
    """Tabulate a design's iterations for batches 1..max_batch over `contexts` (module docstring)."""
    system, target = config.system, config.target
    speculative = config.schedule != "ar"
    same = system.draft.name == system.verify.name
    devices = [system.verify] if (same or not speculative) else [system.draft, system.verify]
    idle = float(sum(d.idle_power_w for d in devices))
    apart = speculative and not same
    cap = batching.speculate_max_batch or batching.max_batch
    grid = batch_grid(batching.max_batch, (cap, cap + 1))
    ar = processor_forward_cost(target, system.verify, 1, contexts[None, :], grid[:, None])
    ar_s = np.asarray(ar.time_s, dtype=float)
    warnings: list[str] = []
    if not speculative:
        nan = np.full((len(grid), len(contexts)), np.nan)
        spec, pool, expected, verify_tokens = (nan,) * 5, np.ones(1), 1.0, 1
    else:
        shape = round_shape(dataclasses.replace(config, batch=1), rounds, seed)
        spec = np.stack([_spec_row(config, shape, int(b), contexts, b <= cap) for b in grid], axis=1)
        pool, expected = _token_pool(config, shape, seed), float(shape.expected_tokens)
        if shape.sample_tokens is None and abs(pool.mean() - expected) > 0.02 * expected:
            warnings.append(f"serving: tokens per round drawn from the acceptance statistics ({pool.mean():.3f}) "
                            f"shifted to the trace replay's mean ({expected:.3f}); the spread is the statistics'")
            pool = _mean_preserving(pool, expected)
        verify_tokens = int(np.ceil(float(shape.widths.sum()))) + 1
        if batching.chunk_tokens and min(cap, batching.max_batch) * verify_tokens > batching.chunk_tokens:
            warnings.append(f"serving: at most {batching.chunk_tokens // verify_tokens} sequences speculate per iteration "
                            f"under the {batching.chunk_tokens:,}-token budget ({verify_tokens} verify tokens each, as "
                            "vLLM counts them): the others wait their turn and prompts wait for what is left; raise "
                            "--chunk-tokens to serve more at once")
        if np.all(np.isnan(spec[0])):
            warnings.append("serving: the design is infeasible at every batch and context of this load "
                            "(draft or verify memory): every iteration decodes autoregressively")
    ar_energy = device_energy_j(system.verify.decode_power_w, system.verify.idle_power_w, ar_s, ar_s) + (
        0.0 if (same or not speculative) else system.draft.idle_power_w * ar_s)
    rows = lambda table: _rows(grid, table, batching.max_batch)  # noqa: E731
    return IterationCosts(
        contexts=contexts.astype(float), spec_cycle_s=rows(spec[0]), spec_fill_tokens=rows(spec[1]),
        spec_energy_j=rows(spec[2]), spec_draft_busy_s=rows(spec[3]),
        spec_verify_busy_s=rows(spec[4]), ar_step_s=rows(ar_s), ar_energy_j=rows(ar_energy),
        verify_tokens=verify_tokens, token_pool=np.asarray(pool, dtype=float),
        expected_tokens=expected, idle_power_w=idle, verify_busy_w=float(system.verify.decode_power_w),
        verify_idle_w=float(system.verify.idle_power_w), draft_busy_w=float(system.draft.decode_power_w) if apart else 0.0,
        draft_idle_w=float(system.draft.idle_power_w) if apart else 0.0,
        price_usd_per_s=devices_price_usd_per_s(devices), kv_capacity_tokens=kv_capacity_tokens(config, batching),
        speculative=speculative,
        draft_prefills=speculative and not getattr(config.draft, "drafts_by_lookup", False),
        draft_on_verifier=same, warnings=tuple(warnings))


def forward_s(config: DecodeConfig, parts) -> float:
    """One forward on the verifier over (new tokens, context, sequences) parts (costs.mixed_forward_cost)."""
    return float(mixed_forward_cost(config.target, config.system.verify, parts).time_s)


def draft_prefill_s(config: DecodeConfig, parts) -> float:
    """The drafter filling its own cache with prompt chunks (new tokens, cached tokens, 1) on its device:
    a draft model runs its layers over them, a head its layer over the target's features."""
    return float(sum(float(device_forward_cost(config.draft, config.system.draft, n, c, b).time_s) for n, c, b in parts))
