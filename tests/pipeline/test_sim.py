"""Closed forms against the discrete-event simulator: within 1% on the mean for every case
(25 configurations over every schedule; fixed seeds; static trees exact, dynamic ones Monte Carlo)."""

import math
import tracemalloc

import numpy as np
import pytest

from dfvg_dse import sim as sim_module
from dfvg_dse.acceptance import expected_tokens
from dfvg_dse.pipeline import estimate
from dfvg_dse.pipeline.crosscheck import CASES, build_case
from dfvg_dse.sim import _Histogram, walk_tree, simulate
from dfvg_dse.specs import AcceptanceProfile, InputError
from dfvg_dse.tree import parse_tree_spec


@pytest.fixture(scope="module")
def cases(parts):
    return {case[0]: build_case(case, parts) for case in CASES}


def test_there_are_at_least_20_cases_over_every_schedule(cases):
    assert len(cases) >= 20
    assert {c.schedule for c in cases.values()} == {"ar", "sequential", "overlap"}
    assert any(c.gpu_fill for c in cases.values()) and any(c.dynamic is not None for c in cases.values())


@pytest.mark.slow
@pytest.mark.parametrize("label", [c[0] for c in CASES])
def test_closed_form_matches_the_simulator_within_1_percent(cases, label):
    config = cases[label]
    dynamic = config.dynamic is not None
    closed = estimate(config, rounds=20000 if dynamic else 1, seed=0)
    sim = simulate(config, rounds=20000 if dynamic else 50000, seed=1)
    assert closed.feasible
    assert sim.tokens_per_s == pytest.approx(closed.tokens_per_s, rel=0.01)
    assert sim.j_per_token == pytest.approx(closed.energy.j_per_token, rel=0.01)
    if closed.hit_probability is not None and config.schedule == "overlap":
        assert sim.hit_rate == pytest.approx(closed.hit_probability ** config.batch, abs=0.01)  # all sequences hit


def test_simulator_statistics_are_consistent(cases):
    sim = simulate(cases["overlap + GPU fill, seq:3x4"], rounds=20000, seed=3)
    assert 0 < sim.p50_time_per_token_s <= sim.p99_time_per_token_s <= sim.p99_round_time_s
    assert 0 <= sim.draft_idle_fraction <= 1 and 0 <= sim.verify_idle_fraction <= 1
    assert 0 < sim.wasted_draft_fraction < 1
    seq = simulate(cases["FPGA chain:5, staged PCIe"], rounds=20000, seed=3)
    assert seq.wasted_draft_fraction == 0 and seq.verify_idle_fraction > 0.1


@pytest.mark.parametrize("label", ["overlap + GPU fill, seq:3x4", "FPGA chain:4, batch 4",
                                   "ADAPT overlap + fill (DFVG, dynamic)"])
def test_chunked_equals_unchunked_to_tolerance(cases, label):
    config = cases[label]
    rounds = 1500 if config.dynamic is not None else 12000
    one = simulate(config, rounds=rounds, seed=5, chunk_rounds=rounds)
    many = simulate(config, rounds=rounds, seed=5, chunk_rounds=rounds // 7)  # the last chunk is short
    se = math.hypot(one.tokens_per_s_standard_error, many.tokens_per_s_standard_error)
    assert abs(one.tokens_per_s - many.tokens_per_s) < 4 * se
    assert one.hit_rate == pytest.approx(many.hit_rate, abs=4 * math.sqrt(0.25 / rounds) * math.sqrt(2))
    assert one.j_per_token == pytest.approx(many.j_per_token, rel=0.02)
    assert one.expected_tokens_per_round == pytest.approx(many.expected_tokens_per_round, rel=0.03)
    assert one.rounds == many.rounds == rounds
    assert simulate(config, rounds=rounds, seed=5, chunk_rounds=rounds // 7) == many  # deterministic for a seed


def test_peak_memory_does_not_grow_with_rounds(cases):
    def peak(rounds: int) -> int:
        tracemalloc.start()
        try:
            simulate(cases["overlap FPGA kary:2x3"], rounds=rounds, seed=2, chunk_rounds=1000)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(40000) < 1.3 * peak(4000)


def test_percentiles_follow_numpy_to_the_histogram_resolution():
    rng = np.random.default_rng(0)
    values, weights = rng.lognormal(-5, 1, 5000), rng.integers(1, 5, 5000)
    hist = _Histogram()
    hist.add(values[:2000], weights[:2000])
    hist.add(values[2000:], weights[2000:])
    for q in (1, 50, 99):
        assert hist.percentile(q) == pytest.approx(np.percentile(np.repeat(values, weights), q), rel=2e-4)


def test_walk_tree_samples_f_of_a_wide_tree(parts):
    # 4096 children of the root: the child lookup is by binary search, not a nodes x ranks table
    tree = parse_tree_spec("parents:" + ",".join(["-1"] + ["0"] * 4096))
    profile = AcceptanceProfile("wide", tuple([0.5 / 4096] * 4096))
    table = profile.matrix(2, 4096)
    accepted, rank0 = walk_tree(tree, table, 200000, np.random.default_rng(1))
    assert accepted.mean() + 1 == pytest.approx(expected_tokens(tree, profile), abs=4 * 0.5 / math.sqrt(200000))
    chain = parse_tree_spec("kary:2x3")
    accepted, rank0 = walk_tree(chain, parts["profile"].matrix(4, 2), 100000, np.random.default_rng(2))
    assert accepted.mean() + 1 == pytest.approx(expected_tokens(chain, parts["profile"]), abs=0.02)


def test_work_past_the_limit_is_refused_up_front(cases, monkeypatch):
    config = cases["FPGA chain:4, batch 4"]
    monkeypatch.setattr(sim_module, "MAX_SIM_WORK", 1000 * 4 * 5)  # 1000 rounds x batch 4 x 5 levels
    simulate(config, rounds=1000)
    with pytest.raises(InputError, match=r"1,001 rounds x batch 4 x 5 work units .* use at most 1,000 rounds"):
        simulate(config, rounds=1001)
    with pytest.raises(InputError, match="seed = -3"):
        simulate(config, rounds=10, seed=-3)
