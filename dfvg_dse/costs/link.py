"""Time and energy of moving bytes over a link (docs/cost-model.md §5, §6).

    t(B) = hops x (alpha + B / (efficiency x beta)) + software overhead

A host-staged path (FPGA -> host memory -> GPU) is two DMA hops plus host software; a
peer-to-peer path is one. The bound is `latency` when the fixed part exceeds the bandwidth part,
else `bandwidth`. DFVG sends 16-byte token records, so its transfers are latency-bound.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.specs import LinkSpec
from dfvg_dse.units import BITS_PER_BYTE

LINK_BOUNDS = ("latency", "bandwidth")


class LinkTime(NamedTuple):
    """One transfer: total, fixed and bandwidth parts in seconds; `bound` indexes LINK_BOUNDS."""

    time_s: np.ndarray
    latency_time_s: np.ndarray
    transfer_time_s: np.ndarray
    bound: np.ndarray
    energy_j: np.ndarray


def link_time(link: LinkSpec, n_bytes) -> LinkTime:
    """Time and energy of one transfer of `n_bytes` over `link` (arrays broadcast)."""
    payload = np.asarray(n_bytes, dtype=float)
    fixed = link.hops * link.latency_s + link.software_overhead_s + 0.0 * payload
    transfer = link.hops * payload / link.achieved_bandwidth_bytes_per_s
    bound = np.where(fixed >= transfer, 0, 1).astype(np.int8)
    energy = link.hops * payload * BITS_PER_BYTE * link.energy_j_per_bit
    return LinkTime(fixed + transfer, fixed, transfer, bound, energy)


def link_bound_names(bound) -> np.ndarray:
    return np.asarray(LINK_BOUNDS)[np.asarray(bound, dtype=int)]
