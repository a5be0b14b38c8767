"""Several FPGAs drafting side by side (issue 17): each holds the whole draft and takes 1/N of a
forward's branches, so N FPGAs of L lanes price a forward of n tokens as one FPGA prices n / N."""

from __future__ import annotations

import numpy as np
import pytest

from dfvg_dse.costs import device_forward_cost, memory_fit
from dfvg_dse.pipeline.grid import fpga_variant
from dfvg_dse.specs import InputError, SpecError


@pytest.mark.parametrize("fpgas", [2, 4])
def test_n_fpgas_take_a_share_of_the_branches(catalog, fpgas):
    model, one = catalog.model("qwen3-0.6b"), catalog.device("v80")
    group = catalog.device(f"{fpgas}xv80")
    lanes = one.fpga.branch_lanes
    assert group.fpga.branch_lanes == fpgas * lanes and group.fpga.pe_dsp_count == fpgas * one.fpga.pe_dsp_count
    assert group.fpga.sram_bytes == one.fpga.sram_bytes  # each FPGA keeps its own SRAM, a copy of the draft
    n = np.array([1, 3, lanes, 2 * lanes, 4 * lanes, 8 * lanes])
    pairs = n.astype(float)  # a star: every branch hangs off the root
    spread = device_forward_cost(model, group, n, 512, 1, pairs)
    busiest = np.ceil(n / fpgas)  # whole tokens: the busiest FPGA's share
    share = device_forward_cost(model, one, busiest, 512, 1, busiest)
    np.testing.assert_allclose(spread.time_s, share.time_s)
    np.testing.assert_allclose(spread.flops, share.flops)
    # brute force over passes: one FPGA needs ceil(n / L) passes of the weights, N side by side ceil(n / (N L))
    np.testing.assert_array_equal(spread.passes, np.ceil(n / (fpgas * lanes)))
    single = device_forward_cost(model, one, n, 512, 1, pairs)
    assert np.all(spread.time_s <= single.time_s + 1e-12) and spread.time_s[-1] < single.time_s[-1] / (fpgas * 0.9)
    assert float(spread.time_s[0]) == pytest.approx(float(single.time_s[0]))  # one token: no help
    assert float(spread.flops[0]) == pytest.approx(float(single.flops[0]))
    assert group.decode_power_w == fpgas * one.decode_power_w


def test_a_search_variant_of_a_group_keeps_each_fpgas_share(catalog):
    model, group = catalog.model("qwen3-0.6b"), catalog.device("2xv80")
    half = fpga_variant(group, 0.5, 250.0)
    one_half = fpga_variant(catalog.device("v80"), 0.5, 250.0)
    t = device_forward_cost(model, half, 64, 512, 1, 64.0).time_s
    assert float(t) == pytest.approx(float(device_forward_cost(model, one_half, 32, 512, 1, 32.0).time_s))


def test_memory_is_checked_per_fpga_with_the_whole_draft(catalog):
    model = catalog.model("qwen3-0.6b")
    fit, one = memory_fit(model, catalog.device("2xv80"), 512), memory_fit(model, catalog.device("v80"), 512)
    assert fit.capacity_bytes == one.capacity_bytes and fit.weight_bytes == one.weight_bytes


def test_fpga_groups_that_are_not_modelled_are_refused(catalog):
    with pytest.raises(InputError, match=r"splitting the layers over FPGAs \(a pipeline degree\) is not modelled"):
        catalog.device("4xv80-pp2")
    with pytest.raises(InputError, match="a CPU stage is one device"):
        catalog.device("2xxeon-8480plus")
    with pytest.raises(SpecError, match="already a group"):
        from dfvg_dse.specs.parallel import group_device
        group_device(catalog.device("2xv80"), 2)


def test_a_one_token_step_of_a_mixture_of_experts_draft_is_no_faster_on_more_fpgas(catalog):
    """One token cannot be split: it touches its k experts on one FPGA however many there are."""
    model = catalog.model("qwen3-30b-a3b")
    times = [float(device_forward_cost(model, catalog.device(d), 1, 0).time_s) for d in ("v80", "2xv80", "4xv80")]
    assert times[1] == pytest.approx(times[0]) and times[2] == pytest.approx(times[0])
    three = float(device_forward_cost(model, catalog.device("2xv80"), 3, 0, 1, 3.0).time_s)
    assert three == pytest.approx(float(device_forward_cost(model, catalog.device("v80"), 2, 0, 1, 2.0).time_s))
