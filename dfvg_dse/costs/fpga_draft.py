"""Forward time on an FPGA overlay drafting engine (docs/cost-model.md §4; DFVG, ASPLOS 2026, §3).

- Peak = PE DSPs x 2 x products per DSP x clock (DFVG packs two BF16 products per DSP58).
- Weights stay in on-chip SRAM when they fit there; the step is then compute-bound. Otherwise
  they stream from the first off-chip tier (HBM, else DDR).
- Branches that share a prefix form one "block event": the weights loaded once serve every
  branch, up to `branch_lanes` tokens per pass. A forward of b x n tokens takes
  ceil(b n / lanes) passes, each streaming the weights again.
- The draft KV cache lives on chip in the SRAM the weights leave free; the rest spills to HBM.
- On-chip SRAM and off-chip memory are separate ports, so their transfer times overlap.
- Several FPGAs (`2xv80`) each hold the whole draft and the KV of the shared context, and take
  1/N of a forward's tokens (a tree level's branches, the batch's sequences): the forward lasts as
  long as the busiest FPGA's share, ceil(b n / N) whole tokens (a one-token step is no faster). The
  accepted tokens' draft KV, which the other FPGAs lack, is recomputed nowhere and sent nowhere here
  (a few kB per token per round).
"""

from __future__ import annotations

import numpy as np

from dfvg_dse.costs.roofline import ForwardCost, forward_cost, memory_time_s, roofline_time
from dfvg_dse.costs.work import chain_tree_pairs, forward_work
from dfvg_dse.specs import DeviceSpec, ModelSpec
from dfvg_dse.specs.parallel import unit_of


def fpga_forward_cost(model: ModelSpec, device: DeviceSpec, n_tokens, context_tokens, batch=1,
                      tree_pairs=None) -> ForwardCost:
    """Time of one forward of n new tokens at context c and batch b on an FPGA, in seconds."""
    if device.parallel is not None:  # N side by side: the busiest one's whole tokens, ceil(n b / N)
        fpgas, b = device.parallel.devices, np.asarray(batch, dtype=float)
        n = np.asarray(n_tokens, dtype=float)
        share = np.ceil(n * b / fpgas) / (n * b)  # of this forward's tokens (and of its attention pairs)
        pairs = chain_tree_pairs(n) if tree_pairs is None else np.asarray(tree_pairs, dtype=float)
        return fpga_forward_cost(model, unit_of(device), n * share, context_tokens, batch, pairs * share)
    fabric = device.fpga
    work = forward_work(model, n_tokens, context_tokens, batch, tree_pairs)
    tokens = np.asarray(n_tokens, dtype=float) * np.asarray(batch, dtype=float)
    passes = np.ceil(tokens / fabric.branch_lanes)
    weight_bytes = work.weight_bytes  # per pass
    on_chip = weight_bytes <= fabric.sram_bytes
    # SRAM left for the KV cache once resident weights take their share.
    kv_capacity = np.where(on_chip, fabric.sram_bytes - weight_bytes, fabric.sram_bytes)
    kv_on_chip_share = np.clip(kv_capacity / np.maximum(work.kv_cache_bytes, 1.0), 0.0, 1.0)
    kv_traffic = work.kv_read_bytes + work.kv_write_bytes
    weights_traffic = passes * weight_bytes
    sram_bytes = np.where(on_chip, weights_traffic, 0.0) + kv_traffic * kv_on_chip_share
    offchip_bytes = np.where(on_chip, 0.0, weights_traffic) + kv_traffic * (1.0 - kv_on_chip_share)
    offchip = device.main_memory
    memory = memory_time_s(
        [sram_bytes, offchip_bytes],
        [fabric.sram_bandwidth_bytes_per_s * fabric.sram_efficiency, offchip.achieved_bandwidth_bytes_per_s])
    compute = work.flops / (device.peak_for(model.compute_dtype) * device.eta_compute)
    overhead = passes * (device.forward_overhead_s + model.n_layers * device.layer_overhead_s)
    roof = roofline_time(compute, memory, overhead)
    return forward_cost(roof, work.flops, sram_bytes + offchip_bytes, passes, on_chip)
