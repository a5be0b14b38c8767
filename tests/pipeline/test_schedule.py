"""Schedules: limiting cases, orderings and energy bookkeeping (docs/pipeline.md)."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dfvg_dse.costs import processor_forward_cost, tree_draft_time_s, tree_verify_cost
from dfvg_dse.pipeline import estimate, expected_round
from dfvg_dse.specs import AcceptanceProfile, DecodeConfig, SystemSpec
from dfvg_dse.tree import chain, parse_tree_spec


def test_ar_is_one_token_per_target_step(parts):
    config = DecodeConfig(parts["target"], SystemSpec(parts["gpu"], parts["gpu"]), schedule="ar")
    est = estimate(config)
    step = float(processor_forward_cost(parts["target"], parts["gpu"], 1, 512, 1).time_s)
    assert est.tokens_per_s == pytest.approx(1 / step) and est.speedup_vs_ar == pytest.approx(1.0)


def test_acceptance_zero_is_no_better_than_ar_minus_the_overheads(make, parts):
    zero = AcceptanceProfile("zero", (0.0,))
    for config in (make(tree=chain(4), profile=zero), make("gpu", "gpu", tree=chain(4), profile=zero),
                   make(tree=chain(4), profile=zero, schedule="overlap")):
        est = estimate(config)
        assert est.expected_tokens_per_round == 1.0 and est.speedup_vs_ar < 1.0
    seq = estimate(make(tree=chain(4), profile=zero))
    d = float(tree_draft_time_s(parts["draft"], parts["fpga"], [1, 1, 1, 1], 512)[0])
    v = float(tree_verify_cost(parts["target"], parts["gpu"], 4, 15, 512).time_s)
    link = seq.link["time_s"]
    assert seq.tokens_per_s == pytest.approx(1 / (d + link + v))


def test_acceptance_one_with_free_drafting_is_bounded_by_the_verify_rate(make, parts):
    one = AcceptanceProfile("one", (1.0,))
    free = dataclasses.replace(parts["fpga"], layer_overhead_s=0.0, forward_overhead_s=0.0,
                               peak_flops_per_s=(("bf16", 1e30), ("fp16", 1e30)), memory=tuple(
        dataclasses.replace(t, bandwidth_bytes_per_s=1e30) for t in parts["fpga"].memory),
        fpga=dataclasses.replace(parts["fpga"].fpga, sram_bandwidth_bytes_per_s=1e30, pe_dsp_count=10848,
                                 clock_hz=1e15))
    free_link = dataclasses.replace(parts["staged"], latency_s=0.0, software_overhead_s=0.0, bandwidth_bytes_per_s=1e30)
    config = DecodeConfig(parts["target"], SystemSpec(free, parts["gpu"], free_link), parts["draft"], one,
                          tree=chain(6), sync_s=0.0)
    est = estimate(config)
    v = float(tree_verify_cost(parts["target"], parts["gpu"], 6, 28, 512).time_s)
    assert est.expected_tokens_per_round == 7
    assert est.tokens_per_s <= 7 / v * (1 + 1e-9) and est.tokens_per_s == pytest.approx(7 / v, rel=1e-6)


def test_zero_link_cost_gives_the_single_device_formula(make, parts):
    free_link = dataclasses.replace(parts["staged"], latency_s=0.0, software_overhead_s=0.0, bandwidth_bytes_per_s=1e30)
    tree = parse_tree_spec("kary:2x3")
    two = estimate(DecodeConfig(parts["target"], SystemSpec(parts["fpga"], parts["gpu"], free_link), parts["draft"],
                                parts["profile"], tree=tree))
    shape, times, line = expected_round(make(tree=tree))
    d, v = float(times.draft_s[0]), float(times.verify_s[0])
    assert two.round_time_s == pytest.approx(d + v, rel=1e-9)  # D + V, as on one device
    same = estimate(make("gpu", "gpu", tree=tree))
    d_gpu = float(tree_draft_time_s(parts["draft"], parts["gpu"], tree.level_widths(), 512)[0])
    assert same.round_time_s == pytest.approx(d_gpu + v, rel=1e-9)


@settings(max_examples=30)
@given(st.floats(0.3, 0.95), st.integers(1, 8), st.sampled_from(["chain", "seq:2x", "kary:2x"]),
       st.sampled_from(["staged", "p2p"]), st.booleans())
def test_overlap_is_no_slower_than_sequential_and_no_faster_than_its_slowest_stage(make, alpha, depth, family, link,
                                                                                     fill):
    tree = parse_tree_spec(f"chain:{depth}" if family == "chain" else f"{family}{min(depth, 4)}")
    profile = AcceptanceProfile("a", (alpha, (1 - alpha) / 2))
    seq = estimate(make(tree=tree, profile=profile, link=link))
    over = estimate(make(tree=tree, profile=profile, link=link, schedule="overlap", gpu_fill=fill))
    assert over.tokens_per_s >= seq.tokens_per_s * (1 - 1e-12)
    stages = max(over.stages["draft"]["time_s"], over.stages["verify"]["time_s"] + over.link["time_s"])
    assert over.round_time_s >= stages * (1 - 1e-12)
    if not fill:
        assert over.round_time_s <= seq.round_time_s * (1 + 1e-12)


@pytest.mark.parametrize("kw", [dict(tree=chain(5)), dict(tree=chain(5), schedule="overlap", gpu_fill=True),
                                dict(draft="gpu", tree=parse_tree_spec("seq:3x3"))])
def test_energy_is_non_negative_and_adds_up(make, kw):
    config = make(**kw)
    est = estimate(config)
    e = est.energy
    assert min(e.draft_energy_j, e.verify_energy_j, e.link_energy_j) >= 0
    # by hand: each device at decode power while busy, idle power for the rest of the round
    draft, verify, cycle = config.system.draft, config.system.verify, est.round_time_s
    busy_v = est.stages["verify"]["busy_fraction"] * cycle
    busy_d = est.stages["draft"]["busy_fraction"] * cycle
    if draft.name == verify.name:
        busy = min(cycle, busy_v + busy_d)
        expected = verify.decode_power_w * busy + verify.idle_power_w * (cycle - busy)
    else:
        expected = (draft.decode_power_w * busy_d + draft.idle_power_w * (cycle - busy_d)
                    + verify.decode_power_w * busy_v + verify.idle_power_w * (cycle - busy_v))
    assert e.draft_energy_j + e.verify_energy_j == pytest.approx(expected, rel=1e-9)
    link_bits = 8 * (est.link["down_bytes"] + est.link["up_bytes"]) if est.link else 0.0
    hops = config.system.link.hops if config.system.link else 0
    assert e.link_energy_j == pytest.approx(hops * link_bits * (config.system.link.energy_j_per_bit if hops else 0))
    tokens = est.tokens_per_s * cycle
    assert e.j_per_token == pytest.approx((expected + e.link_energy_j) / tokens)
    assert e.energy_efficiency_vs_ar == pytest.approx(e.ar_j_per_token / e.j_per_token)


@pytest.mark.parametrize("kw, reason", [
    (dict(draft="gpu", tree=chain(3), schedule="overlap"), "overlap needs two devices"),
    (dict(tree=parse_tree_spec("kary:40x1")), "exceeds the 32 branch lanes"),
    (dict(verify="fpga", draft="gpu", tree=chain(2)), "is an FPGA"),
])
def test_infeasible_designs_say_why(make, kw, reason):
    est = estimate(make(**kw))
    assert not est.feasible and reason in est.reason and est.tokens_per_s is None


def test_a_target_that_does_not_fit_is_infeasible(catalog, parts):
    big = catalog.model("llama-2-70b")
    est = estimate(DecodeConfig(big, SystemSpec(parts["gpu"], parts["gpu"]), schedule="ar"))
    assert not est.feasible and "needs 138" in est.reason


def test_autoregressive_decoding_needs_room_for_the_target_alone(parts):
    # a draft named beside AR on the same GPU is never loaded: at batch 64 Qwen3-8B's cache fits the
    # RTX 4090 alone, not with Qwen3-0.6B's weights and cache beside it
    from dfvg_dse.costs import memory_fit
    gpu, target, draft = parts["gpu"], parts["target"], parts["draft"]
    alone = memory_fit(target, gpu, 513, 64)
    beside = memory_fit(draft, gpu, 513, 64, beside_target=True)
    assert alone.fits and float(alone.required_bytes + beside.required_bytes) > alone.capacity_bytes
    ar = estimate(DecodeConfig(target, SystemSpec(gpu, gpu), draft, parts["profile"], schedule="ar", batch=64))
    assert ar.feasible, ar.reason
    spec = estimate(DecodeConfig(target, SystemSpec(gpu, gpu), draft, parts["profile"], tree=chain(2), batch=64))
    assert not spec.feasible and "target and draft need" in spec.reason


def test_batch_amortises_weights_but_shrinks_the_gain(make):
    gains = [estimate(make(tree=chain(4), batch=b)).speedup_vs_ar for b in (1, 16, 64)]
    assert gains[0] > gains[2]  # speculation pays less as b grows (Su et al.)
