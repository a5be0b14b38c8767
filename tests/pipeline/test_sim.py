"""Closed forms against the discrete-event simulator: within 1% on the mean for every case
(25 configurations over every schedule; fixed seeds; static trees exact, dynamic ones Monte Carlo)."""

import pytest

from dfvg_dse.pipeline import estimate
from dfvg_dse.pipeline.crosscheck import CASES, build_case
from dfvg_dse.sim import simulate


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
