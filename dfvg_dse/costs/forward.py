"""One entry point for a forward on any device kind, the memory-fit check, and the warnings for a
compute dtype the device has no peak for (docs/cost-model.md §4) and for an engine profile that
prices the device with another class's kernels or without its device class's scales (docs/engines.md)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.costs.fpga_draft import fpga_forward_cost
from dfvg_dse.costs.parallel import group_shard
from dfvg_dse.costs.processor import processor_forward_cost
from dfvg_dse.costs.roofline import ForwardCost
from dfvg_dse.costs.work import stored_weight_bytes
from dfvg_dse.specs import DeviceSpec, ModelSpec


def compute_dtype_warnings(model: ModelSpec, device: DeviceSpec) -> list[str]:
    """One line when `device` has no peak for the model's compute dtype and a wider rate is used.

    Weight-only practice (A100 with fp8 weights): bytes are those of the stored dtype, compute runs
    at the fallback's rate. The line names the device, the dtype asked for and the rate used. Under
    an engine profile, one line more each when its kernels for these weights are another class's and
    when it has no scales for the device's class (a family no published row measured: B200, MI300X);
    and the caveats of the group and model: a dense model on an expert-parallel group, MLA's known gap.
    """
    peak = device.compute_peak(model.compute_dtype)
    lines = []
    if peak.fell_back:
        lines.append(f"{device.name} has no {peak.requested} peak: {model.name}'s {model.weight_dtype} weights are "
                     f"costed at its {peak.dtype} rate, {peak.flops_per_s / 1e12:.4g} TFLOP/s dense peak "
                     f"({model.weight_bytes_per_param:g} B per weight streamed, compute as {peak.dtype})")
    if model.mla is not None and device.engine is not None:  # docs/cost-model.md, "Not an anchor yet"
        lines.append(f"{model.name}'s multi-head latent attention and 256-expert layers run kernels the engine "
                     f"profiles were not fitted on: SGLang's published batch-1 decode of DeepSeek-V3 on 8 H200s, 30.3 "
                     f"tokens/s, is several times slower than this model prices it (docs/cost-model.md)")
    if device.parallel is not None and device.parallel.expert > 1 and model.moe is None:
        lines.append(f"{device.name}: {model.name} is dense, so expert parallelism does not apply: priced tensor "
                     f"parallel over {device.parallel.tensor} GPUs")
    if device.engine is not None:
        kernel, fell_back = device.engine.kernel(model.weight_dtype)
        if fell_back:  # no published rows of this engine with these weights: another class's kernels price them
            lines.append(f"engine {device.engine.name} has no kernels fitted for {model.weight_dtype} weights: "
                         f"priced with its {kernel.weight_class} kernels (docs/engines.md)")
        if not device.own_engine and device.engine.lacks_scales(device.device_class):
            # no published rows on this family of GPUs: the pooled efficiencies, unscaled, price it
            lines.append(f"engine {device.engine.name} has no scales fitted for {device.name}'s device class "
                         f"'{device.device_class or '(none)'}': priced at scale (1.0, 1.0) of its efficiencies "
                         "(docs/engines.md)")
    return lines


def device_forward_cost(model: ModelSpec, device: DeviceSpec, n_tokens, context_tokens, batch=1,
                        tree_pairs=None) -> ForwardCost:
    """Time of one forward of n new tokens at context c and batch b on `device`, in seconds."""
    if device.kind == "fpga":
        return fpga_forward_cost(model, device, n_tokens, context_tokens, batch, tree_pairs)
    return processor_forward_cost(model, device, n_tokens, context_tokens, batch, tree_pairs)


class MemoryFit(NamedTuple):
    """Does the model and its KV cache fit the device's off-chip memory? Bytes, arrays."""

    fits: np.ndarray
    required_bytes: np.ndarray
    capacity_bytes: float
    weight_bytes: float
    kv_cache_bytes: np.ndarray


def memory_fit(model: ModelSpec, device: DeviceSpec, context_tokens, batch=1, beside_target: bool = False) -> MemoryFit:
    """Stored weights (every parameter once) plus a KV cache of b x c tokens against capacity.

    `context_tokens` should count every token the cache must hold (prompt, generated and the
    tokens in flight). A group of GPUs is checked per device: the largest shard (costs/parallel.py) against one device.
    """
    capacity = device.memory_capacity_bytes
    if device.parallel is not None:  # FPGAs side by side each hold the whole draft
        group = device.parallel
        if device.kind == "gpu":
            model = group_shard(model, device)
        capacity = group.unit.memory_capacity_bytes
    weights = stored_weight_bytes(model, beside_target)
    cached = model.attended_context(np.asarray(context_tokens, dtype=float))  # a rolling buffer under a window
    kv = np.asarray(batch, dtype=float) * cached * model.kv_bytes_per_token
    required = weights + kv
    return MemoryFit(required <= capacity, required, capacity, weights, kv)
