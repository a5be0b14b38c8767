"""FPGA drafting: derived peak, weight residency, branch reuse up to the lanes, KV spill."""

import dataclasses

import numpy as np
import pytest

from dfvg_dse.costs import fpga_forward_cost, knee_tokens, param_counts
from dfvg_dse.specs import ModelSpec


def test_peak_is_pe_dsps_times_two_times_packing_times_clock(catalog):
    v80 = catalog.device("v80")
    # DFVG design: 8,192 DSP58 in the PE arrays, two BF16 products per DSP, 300 MHz
    assert v80.fpga.peak_flops_per_s == pytest.approx(8192 * 2 * 2 * 300e6)


def test_branches_share_one_weight_load_until_the_knee_or_the_lanes(catalog):
    # DFVG drafts in BF16 (two products per DSP58); the checkpoint's config says float32
    draft, v80 = catalog.model("llama-160m").with_dtypes("bfloat16", "bfloat16"), catalog.device("v80")
    lanes = v80.fpga.branch_lanes
    width = np.arange(1, 3 * lanes + 1)
    cost = fpga_forward_cost(draft, v80, width, 128, 1)
    assert not cost.weights_on_chip.any()  # 0.32 GB of bf16 weights exceed the 88 MB of on-chip SRAM
    np.testing.assert_array_equal(cost.passes, np.ceil(width / lanes))
    knee = knee_tokens(v80.peak_for("bf16") * v80.eta_compute, v80.main_memory.achieved_bandwidth_bytes_per_s, 2)
    # a level narrower than the compute knee costs about one step: one weight load serves every branch
    assert cost.time_s[int(knee / 2) - 1] / cost.time_s[0] < 1.1
    assert set(cost.bound_name[width < 0.9 * knee]) == {"memory"}
    assert set(cost.bound_name[(width > 1.1 * knee) & (width <= lanes)]) == {"compute"}
    assert np.all(np.diff(cost.time_s) >= 0)
    # with fewer lanes than the knee, one branch past the lanes needs a second pass over the weights
    narrow = dataclasses.replace(v80, fpga=dataclasses.replace(v80.fpga, branch_lanes=4))
    four, five = fpga_forward_cost(draft, narrow, np.array([4, 5]), 128, 1).time_s
    assert five / four == pytest.approx(2.0, rel=0.05)


def test_weights_resident_on_chip_make_the_step_compute_bound(catalog):
    v80 = catalog.device("v80")
    small = ModelSpec(name="s", family="llama", n_layers=4, d_model=512, n_heads=8, n_kv_heads=8, head_dim=64,
                      d_ffn=2048, vocab_size=8000, max_positions=2048)
    weights = param_counts(small).read_per_forward * 2
    assert weights < v80.fpga.sram_bytes
    cost = fpga_forward_cost(small, v80, 32, 0, 1)
    assert bool(cost.weights_on_chip)
    assert str(cost.bound_name) == "compute"
    assert cost.compute_time_s == pytest.approx(float(cost.flops) / (v80.fpga.peak_flops_per_s * v80.eta_compute))
    # with the SRAM shrunk, one token streams the weights from HBM: memory-bound and slower
    no_sram = dataclasses.replace(v80, fpga=dataclasses.replace(v80.fpga, bram_bytes=1e6, uram_bytes=0.0))
    streamed = fpga_forward_cost(small, no_sram, 1, 0, 1)
    assert str(streamed.bound_name) == "memory"
    assert streamed.time_s > 2 * fpga_forward_cost(small, v80, 1, 0, 1).time_s


def test_kv_cache_spills_to_hbm_beyond_the_sram_budget(catalog):
    v80 = catalog.device("v80")
    small = ModelSpec(name="s", family="llama", n_layers=4, d_model=512, n_heads=8, n_kv_heads=8, head_dim=64,
                      d_ffn=2048, vocab_size=8000, max_positions=1 << 20)
    free = v80.fpga.sram_bytes - param_counts(small).read_per_forward * 2
    fits_tokens = int(free / small.kv_bytes_per_token)
    context = np.array([fits_tokens // 4, fits_tokens - 8, 4 * fits_tokens])
    cost = fpga_forward_cost(small, v80, 1, context, 1)
    hbm = v80.main_memory.achieved_bandwidth_bytes_per_s
    spilled = 4 * fits_tokens * small.kv_bytes_per_token * (1 - 1 / 4)  # three quarters of the cache off chip
    assert cost.memory_time_s[2] >= spilled / hbm * 0.99
    assert cost.memory_time_s[2] > 10 * cost.memory_time_s[1]


def test_ddr_fpga_is_slower_than_hbm_fpga(catalog):
    # DFVG sensitivity study: a DDR FPGA (U200) is bandwidth-limited and slower than the HBM V80.
    draft = catalog.model("qwen3-0.6b")
    u200 = fpga_forward_cost(draft, catalog.device("u200"), 8, 512, 1)
    v80 = fpga_forward_cost(draft, catalog.device("v80"), 8, 512, 1)
    assert u200.time_s > 5 * v80.time_s
