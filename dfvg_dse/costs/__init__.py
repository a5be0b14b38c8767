"""Cost models: work counts, roofline, per-device forward time, links and memory fit."""

from dfvg_dse.costs.forward import MemoryFit, compute_dtype_warnings, device_forward_cost, memory_fit
from dfvg_dse.costs.fpga_draft import fpga_forward_cost
from dfvg_dse.costs.link import LINK_BOUNDS, LinkTime, link_bound_names, link_time
from dfvg_dse.costs.processor import mixed_forward_cost, processor_forward_cost
from dfvg_dse.costs.roofline import (BOUNDS, ForwardCost, RooflineTime, bound_names, knee_tokens, memory_time_s,
                                     roofline_time)
from dfvg_dse.costs.stages import round_link_bytes, tree_draft_time_s, tree_verify_cost
from dfvg_dse.costs.work import ForwardWork, ParamCounts, chain_tree_pairs, forward_work, param_counts

__all__ = [
    "BOUNDS", "LINK_BOUNDS", "ForwardCost", "ForwardWork", "LinkTime", "MemoryFit", "ParamCounts", "RooflineTime",
    "bound_names", "chain_tree_pairs", "compute_dtype_warnings", "device_forward_cost", "forward_work",
    "fpga_forward_cost", "knee_tokens", "link_bound_names", "link_time", "memory_fit", "memory_time_s", "mixed_forward_cost", "param_counts",
    "processor_forward_cost",
    "roofline_time", "round_link_bytes", "tree_draft_time_s", "tree_verify_cost",
]
