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

from dfvg_dse.costs.roofline import ForwardCost, forward_cost, roofline_time
from dfvg_dse.costs.work import forward_work
from dfvg_dse.specs import DeviceSpec, ModelSpec


def processor_forward_cost(model: ModelSpec, device: DeviceSpec, n_tokens, context_tokens, batch=1,
                           tree_pairs=None, attention_efficiency: float = 1.0) -> ForwardCost:
    """Time of one forward of n new tokens at context c and batch b on a GPU or CPU, in seconds."""
    work = forward_work(model, n_tokens, context_tokens, batch, tree_pairs)
    peak = device.peak_for(model.compute_dtype) * device.eta_compute
    compute = work.linear_flops / peak + work.attention_flops / (peak * attention_efficiency)
    rows = np.asarray(n_tokens) * np.asarray(batch)
    bandwidth = device.main_memory.achieved_bandwidth_bytes_per_s * np.where(rows > 1, device.multi_row_bandwidth_fraction,
                                                                             1.0)
    memory = work.bytes / bandwidth
    overhead = device.forward_overhead_s + model.n_layers * device.layer_overhead_s
    roof = roofline_time(compute, memory, np.broadcast_to(overhead, np.shape(compute)), device.compute_memory_overlap)
    return forward_cost(roof, work.flops, work.bytes)
