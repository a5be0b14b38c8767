"""Roofline time with fixed overheads, and the name of the bound that set it (docs/cost-model.md §3).

    t = max(FLOPs / (peak x eta_c), bytes / (bandwidth x eta_m)) + t_fixed

Memories that a device reads in parallel (FPGA on-chip SRAM and HBM) overlap, so the memory time
is the slowest tier's, not the sum. The bound is `compute` or `memory`, whichever term of the max
is larger, or `overhead` when the fixed time exceeds both. Arrays in, arrays out.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

BOUNDS = ("compute", "memory", "overhead", "communication")
COMPUTE, MEMORY, OVERHEAD, COMMUNICATION = 0, 1, 2, 3


class RooflineTime(NamedTuple):
    """Time of one forward and its parts, in seconds; `bound` holds indices into BOUNDS."""

    time_s: np.ndarray
    compute_time_s: np.ndarray
    memory_time_s: np.ndarray
    overhead_time_s: np.ndarray
    bound: np.ndarray


def memory_time_s(bytes_per_tier, achieved_bandwidth_per_tier_bytes_per_s) -> np.ndarray:
    """Time to move each tier's bytes when the tiers are read in parallel: the slowest tier."""
    times = [np.asarray(b, dtype=float) / bw for b, bw in zip(bytes_per_tier, achieved_bandwidth_per_tier_bytes_per_s)]
    return np.maximum.reduce(np.broadcast_arrays(*times)) if len(times) > 1 else times[0]


def roofline_time(compute_time, memory_time, overhead_time, overlap: float = 1.0) -> RooflineTime:
    """Combine the three terms: max(compute, memory) + (1 - overlap) min(compute, memory) +
    overhead, with the dominant term named (overlap 1 is the plain roofline)."""
    compute = np.asarray(compute_time, dtype=float)
    memory = np.asarray(memory_time, dtype=float)
    overhead = np.asarray(overhead_time, dtype=float)
    compute, memory, overhead = np.broadcast_arrays(compute, memory, overhead)
    roof = np.maximum(compute, memory) + (1.0 - overlap) * np.minimum(compute, memory)
    bound = np.where(compute >= memory, COMPUTE, MEMORY)
    bound = np.where(overhead > roof, OVERHEAD, bound).astype(np.int8)
    return RooflineTime(roof + overhead, compute, memory, overhead, bound)


def smooth_roofline_time(compute_time, memory_time, overhead_time, sharpness) -> RooflineTime:
    """The p-norm (T_c^p + T_m^p)^(1/p) + overhead: a bent corner where measured t(n) curves bend
    (docs/engines.md); p -> infinity is the plain max. Computed as max x (1 + (min/max)^p)^(1/p)."""
    compute, memory, overhead, p = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in
                                                         (compute_time, memory_time, overhead_time, sharpness)))
    high, low = np.maximum(compute, memory), np.minimum(compute, memory)
    ratio = np.divide(low, high, out=np.zeros_like(high), where=high > 0)
    roof = high * (1.0 + ratio ** p) ** (1.0 / p)
    bound = np.where(compute >= memory, COMPUTE, MEMORY)
    bound = np.where(overhead > roof, OVERHEAD, bound).astype(np.int8)
    return RooflineTime(roof + overhead, compute, memory, overhead, bound)


def bound_names(bound) -> np.ndarray:
    """Index array -> array of names from BOUNDS."""
    return np.asarray(BOUNDS)[np.asarray(bound, dtype=int)]


def knee_tokens(peak_flops_per_s: float, bandwidth_bytes_per_s: float, bytes_per_param: float) -> float:
    """Tokens per forward at which compute time equals weight-streaming time (docs/cost-model.md §3).

    With 2 FLOPs per weight per token and weight bytes W = params x bytes_per_param, compute
    2 n params / peak equals W / bw at n* = peak / bw x bytes_per_param / 2. Peak and bandwidth
    are the achieved values (after eta). Attention and KV traffic are ignored here.
    """
    return peak_flops_per_s / bandwidth_bytes_per_s * bytes_per_param / 2.0


class ForwardCost(NamedTuple):
    """One forward on one device: its time, the bound that set it, and the work behind it.

    Every field is an array broadcast over (n, c, b). `passes` counts the weight-streaming passes
    (FPGA: ceil(b n / lanes); GPU and CPU: 1); `weights_on_chip` is true where an FPGA keeps the
    weights in on-chip SRAM.
    """

    time_s: np.ndarray
    compute_time_s: np.ndarray
    memory_time_s: np.ndarray
    overhead_time_s: np.ndarray
    bound: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    passes: np.ndarray
    weights_on_chip: np.ndarray
    communication_time_s: np.ndarray | float = 0.0  # collectives among a group's devices (costs/parallel.py)

    @property
    def bound_name(self) -> np.ndarray:
        return bound_names(self.bound)

    def with_communication(self, seconds) -> ForwardCost:
        """This forward with `seconds` of collectives after its kernels (they do not overlap at
        decode: each layer waits for its all-reduce); the bound is `communication` where they
        exceed compute, memory and overhead."""
        comm = np.broadcast_to(np.asarray(seconds, dtype=float), np.shape(self.time_s))
        largest = np.maximum.reduce([self.compute_time_s, self.memory_time_s, self.overhead_time_s])
        bound = np.where(comm > largest, COMMUNICATION, self.bound).astype(np.int8)
        return self._replace(time_s=self.time_s + comm, bound=bound, communication_time_s=comm)


def forward_cost(roof: RooflineTime, flops, moved_bytes, passes=1, weights_on_chip=False) -> ForwardCost:
    """Attach the work to a roofline time, broadcasting everything to one shape."""
    arrays = np.broadcast_arrays(*roof, np.asarray(flops, dtype=float), np.asarray(moved_bytes, dtype=float),
                                 np.asarray(passes), np.asarray(weights_on_chip, dtype=bool))
    return ForwardCost(*arrays)
