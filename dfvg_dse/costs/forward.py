"""One entry point for a forward on any device kind, and the memory-fit check (model.md §3, §9)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.costs.fpga_draft import fpga_forward_cost
from dfvg_dse.costs.processor import processor_forward_cost
from dfvg_dse.costs.roofline import ForwardCost
from dfvg_dse.costs.work import param_counts
from dfvg_dse.specs import DeviceSpec, ModelSpec


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


def memory_fit(model: ModelSpec, device: DeviceSpec, context_tokens, batch=1) -> MemoryFit:
    """Stored weights (every parameter once) plus a KV cache of b x c tokens against capacity.

    `context_tokens` should count every token the cache must hold (prompt, generated and the
    tokens in flight).
    """
    weights = float(param_counts(model).total * model.weight_bytes_per_param)
    cached = model.attended_context(np.asarray(context_tokens, dtype=float))  # a rolling buffer under a window
    kv = np.asarray(batch, dtype=float) * cached * model.kv_bytes_per_token
    required = weights + kv
    capacity = device.memory_capacity_bytes
    return MemoryFit(required <= capacity, required, capacity, weights, kv)
