"""Forward time on a GPU or a CPU: weights and KV cache stream from main memory (docs/cost-model.md §4).

GPU: tensor-core peak for the model's compute dtype (GeForce cards: the FP32-accumulate figure,
stored as peak_fp16 in hwdb), HBM/GDDR bandwidth, a kernel-launch overhead per layer and per
forward. CPU: AVX/AMX peak, DDR bandwidth, a dispatch overhead per layer. Two terms calibrated
on a real core (issue 7): `compute_memory_overlap` (a single core running small products does not
hide memory time under compute: the two add) and `multi_row_bandwidth_fraction` (BLAS streams weights
best in its one-row path; its 2-16-row kernels reach a fraction of that bandwidth). Tree attention runs at
`attention_efficiency` of the dense rate (a sparse tree mask is slower than TreeSort-style dense
blocks; 1.0 means dense).
"""

from __future__ import annotations

import numpy as np

from dfvg_dse.costs.parallel import communication_time_s, group_shard
from dfvg_dse.costs.roofline import (COMPUTE, MEMORY, OVERHEAD, ForwardCost, RooflineTime, forward_cost, roofline_time,
                                     smooth_roofline_time)
from dfvg_dse.costs.work import ForwardWork, forward_work, param_counts, streamed_weight_bytes
from dfvg_dse.specs import DeviceSpec, ModelSpec
from dfvg_dse.specs.engines import EngineProfile
from dfvg_dse.specs.parallel import unit_of


def engine_peak_flops_per_s(device: DeviceSpec, compute_dtype: str, fp16_accumulate: bool,
                            mma_sync_only: bool = False) -> float:
    """The dense peak an engine's GEMMs run at: the FP16-accumulate rate where the engine uses it and
    the device has one (GeForce), else the compute dtype's peak; for kernels that issue only
    Ampere-style mma.sync, the share of it the device gives them (Hopper: half, without wgmma)."""
    if fp16_accumulate and compute_dtype == "fp16" and device.fp16_accumulate_peak_flops_per_s:
        peak = device.fp16_accumulate_peak_flops_per_s
    else:
        peak = device.peak_for(compute_dtype)
    return peak * device.mma_sync_fraction if mma_sync_only else peak


def engine_rates(model: ModelSpec, device: DeviceSpec, engine: EngineProfile) -> tuple[float, float]:
    """(GEMM FLOP/s, weight-streaming B/s) an engine's kernels reach on a GPU for this model."""
    kernel, _ = engine.kernel(model.weight_dtype)
    c_scale, m_scale = engine.scales(device.device_class)
    peak = engine_peak_flops_per_s(device, model.compute_dtype, engine.fp16_accumulate, engine.mma_sync_only)
    return (peak * min(1.0, kernel.compute_efficiency * c_scale),
            device.main_memory.bandwidth_bytes_per_s * min(1.0, kernel.bandwidth_efficiency * m_scale))


def profile_time_parts(linear_flops, attention_flops, weight_bytes, kv_bytes, rate, rows, attention_rows, half_rows,
                       attention_fraction, weight_bandwidth, kv_bandwidth, sharpness, launches_s, host_overlap):
    """The kernels of a forward under an engine profile, per operator, and with the host's launches:
    (GEMMs, attention, both with the launches overlapped at q = `host_overlap`). The GEMMs run at
    `rate` x rows / (rows + half_rows) against the weight bytes, attention at the same law over its
    tile's `attention_rows` x `attention_fraction` against the KV bytes, each a smooth roofline of
    sharpness p; they run one after the other. One formula for the cost model and the fit
    (validation/engines.py), so the fit prices as `--engine` does."""
    gemm = rate * rows / (rows + half_rows)  # small GEMMs reach less of the kernels' rate
    tile = rate * attention_rows / (attention_rows + half_rows)
    weights = smooth_roofline_time(linear_flops / gemm, weight_bytes / weight_bandwidth, 0.0, sharpness)
    attention = smooth_roofline_time(attention_flops / (tile * attention_fraction), kv_bytes / kv_bandwidth, 0.0,
                                     sharpness)
    hosted = smooth_roofline_time(weights.time_s + attention.time_s, launches_s, 0.0, host_overlap).time_s
    return weights, attention, hosted


def engine_roofline(model: ModelSpec, device: DeviceSpec, work: ForwardWork, engine: EngineProfile,
                    batch=1, tree_mask_efficiency: float = 1.0, attention_tokens=None) -> RooflineTime:
    """A forward under an engine profile (docs/engines.md), per operator: the GEMMs (their FLOPs
    against the weight bytes, at the weight class's kernels) and attention (its FLOPs against the KV
    bytes) each a smooth roofline; they run one after the other, so their times add. The profile's
    attention rate was fitted on causal forwards; a tree's mask runs at `tree_mask_efficiency` of it
    (DecodeConfig.attention_efficiency: 1 for TreeSort's dense blocks, less for a sparse mask).
    Attention's tiles hold one sequence's new tokens (`attention_tokens`; default the work's rows over
    `batch`) x the query heads of a KV head (one, for a kernel per query head: EngineProfile.per_head_attention)."""
    kv_kernel, _ = engine.kernel(model.kv_dtype)
    _, m_scale = engine.scales(device.device_class)
    gemm, weight_bandwidth = engine_rates(model, device, engine)
    rows = np.asarray(work.linear_flops) / (2.0 * param_counts(model).active_matmul)  # new tokens x batch
    # attention's tiles hold one sequence's new tokens x the query heads of one tile, whatever the batch
    tokens = rows / np.asarray(batch, dtype=float) if attention_tokens is None else np.asarray(attention_tokens, dtype=float)
    kv_bandwidth = device.main_memory.bandwidth_bytes_per_s * min(1.0, kv_kernel.bandwidth_efficiency * m_scale)
    weights, attention, hosted = profile_time_parts(
        work.linear_flops, work.attention_flops, work.weight_bytes, work.kv_read_bytes + work.kv_write_bytes,
        gemm, rows, tokens * engine.query_heads_per_tile(model), engine.half_rows,
        engine.attention_efficiency * tree_mask_efficiency, weight_bandwidth, kv_bandwidth, engine.sharpness,
        model.n_layers * engine.layer_overhead_s, engine.host_overlap)
    roof = weights.time_s + attention.time_s
    overhead = hosted - roof + engine.forward_overhead_s + np.asarray(batch) * engine.sequence_overhead_s
    compute, memory = weights.compute_time_s + attention.compute_time_s, weights.memory_time_s + attention.memory_time_s
    bound = np.where(overhead > roof, OVERHEAD, np.where(compute >= memory, COMPUTE, MEMORY)).astype(np.int8)
    return RooflineTime(roof + overhead, compute, memory, overhead, bound)


def linear_row_ratio(ratios: tuple[float, ...], rows) -> np.ndarray:
    """The measured time of the linear layers over `rows` rows as a multiple of one row's
    (DeviceSpec.linear_row_ratios); past the table, whole blocks of its last row count and the rest."""
    table = np.concatenate([[0.0], ratios])
    blocks, rest = np.divmod(np.rint(np.asarray(rows, dtype=float)).astype(np.int64), len(ratios))
    return blocks * table[-1] + table[rest]


def processor_forward_cost(model: ModelSpec, device: DeviceSpec, n_tokens, context_tokens, batch=1,
                           tree_pairs=None, attention_efficiency: float = 1.0) -> ForwardCost:
    """Time of one forward of n new tokens at context c and batch b on a GPU or CPU (or a group of
    GPUs: one shard's forward and the group's collectives, costs/parallel.py), in seconds."""
    if device.parallel is not None:
        group = device.parallel
        shard = processor_forward_cost(group_shard(model, device, stages=False), unit_of(device), n_tokens, context_tokens,
                                       batch, tree_pairs, attention_efficiency)
        fixed = (device.engine.forward_overhead_s if device.engine is not None else group.unit.forward_overhead_s)
        return shard.with_communication(communication_time_s(model, group, n_tokens, batch)
                                        + (group.pipeline - 1) * fixed)
    work = forward_work(model, n_tokens, context_tokens, batch, tree_pairs)
    return _priced(model, device, work, np.asarray(n_tokens) * np.asarray(batch), batch, attention_efficiency)


def mixed_forward_cost(model: ModelSpec, device: DeviceSpec, parts) -> ForwardCost:
    """One forward over sequences in different phases, as a continuous-batching engine runs it:
    `parts` lists (new tokens per sequence, context, sequences) triples (decodes at one context, a
    prefill chunk over what is already cached). Their FLOPs and KV traffic add; the weights stream
    once, for all rows together; collectives carry every row. Scalars only."""
    rows = float(sum(n * b for n, _, b in parts))
    sequences = float(sum(b for _, _, b in parts))
    if device.parallel is not None:
        group = device.parallel
        shard = mixed_forward_cost(group_shard(model, device, stages=False), unit_of(device), parts)
        fixed = (device.engine.forward_overhead_s if device.engine is not None else group.unit.forward_overhead_s)
        return shard.with_communication(communication_time_s(model, group, rows, 1) + (group.pipeline - 1) * fixed)
    works = [forward_work(model, n, c, b) for n, c, b in parts]
    total = ForwardWork(*(sum(np.asarray(getattr(w, f), dtype=float) for w in works) for f in ForwardWork._fields))
    total = total._replace(weight_bytes=np.asarray(streamed_weight_bytes(model, rows), dtype=float))
    return _priced(model, device, total, rows, sequences, 1.0, mixed_attention_tokens(parts, works))


def mixed_attention_tokens(parts, works) -> float:
    """The new tokens per sequence at which a mixed step's attention, priced as one operator, costs
    what its parts cost apart: each part's attention FLOPs F_i run at its own tile of n_i tokens, and
    at a rate R M / (M + M_half) the sum of F_i / rate(n_i) equals F / rate(m) for m the FLOP-weighted
    harmonic mean of the n_i (whatever R and M_half), so a prefill chunk never speeds up the decodes
    beside it."""
    flops = [float(w.attention_flops) for w in works]
    if sum(flops) <= 0.0:
        return float(max(n for n, _, _ in parts))
    return sum(flops) / sum(f / n for f, (n, _, _) in zip(flops, parts))


def _priced(model: ModelSpec, device: DeviceSpec, work: ForwardWork, rows, sequences, attention_efficiency: float,
            attention_tokens=None) -> ForwardCost:
    """The time of a forward's work on one GPU or CPU: under the device's engine profile when it has
    one, else its roofline. `rows` = new tokens x sequences; `sequences` pay the per-sequence overhead."""
    if device.engine is not None:  # a fitted engine profile replaces the roofline's efficiencies
        return forward_cost(engine_roofline(model, device, work, device.engine, sequences, attention_efficiency,
                                            attention_tokens),
                            work.flops, work.bytes)
    peak = device.peak_for(model.compute_dtype) * device.eta_compute
    compute = work.attention_flops / (peak * attention_efficiency)
    bandwidth = device.main_memory.achieved_bandwidth_bytes_per_s
    if device.linear_row_ratios:  # measured: they time the linear layers whole, their products included
        memory = (work.weight_bytes * linear_row_ratio(device.linear_row_ratios, rows)
                  + work.kv_read_bytes + work.kv_write_bytes) / bandwidth
    else:
        compute = compute + work.linear_flops / peak
        memory = work.bytes / (bandwidth * np.where(rows > 1, device.multi_row_bandwidth_fraction, 1.0))
    overhead = device.forward_overhead_s + model.n_layers * device.layer_overhead_s
    roof = roofline_time(compute, memory, np.broadcast_to(overhead, np.shape(compute)), device.compute_memory_overlap)
    return forward_cost(roof, work.flops, work.bytes)
