"""Dynamic drafting: the model against a naive direct simulation, public vectors T12/T13, invariants."""

import heapq
import math
import tracemalloc

import numpy as np
import pytest

from dfvg_dse.acceptance import (AdaptRule, DuoRule, Eagle2Rule, duo_sequences, expected_tokens, min_depth_for_windows,
                                 simulate_adapt, simulate_duodecoding, simulate_eagle2)
from dfvg_dse.acceptance import dynamic as dynamic_module
from dfvg_dse.specs import AcceptanceProfile, ConfidenceModel, InputError, TreeSpec

MODEL = ConfidenceModel(top1_mean=(0.8, 0.75, 0.7), concentration=4.0, tail_shares=(0.45, 0.2, 0.1, 0.05))
PROFILE = AcceptanceProfile("synthetic", (0.8, 0.09, 0.04, 0.02, 0.01), confidence=MODEL)




def direct_adapt(rule: AdaptRule, rounds: int, seed: int) -> float:
    """Naive direct simulation: draft with ADAPT node by node, then sample the target's choices."""
    rng = np.random.default_rng(seed)
    total = 0
    for _ in range(rounds):
        conf = {(): None}
        drafted = set()
        frontier = [(0.0, ())]
        budget = rule.budget
        for depth in range(1, rule.max_depth + 1):
            candidates = []
            for logp, path in frontier:
                q = MODEL.sample(np.array(depth), rng)
                conf[path] = q
                candidates += [(logp + math.log(q[r]), path + (r,), q[r]) for r in range(len(q))]
            eligible = [c for c in candidates if c[2] > rule.threshold]
            if not eligible and depth <= rule.min_depth:
                eligible = [max(candidates)]
            reserve = max(0, min(rule.min_depth, rule.max_depth) - depth)  # one node per level owed to D_min
            k = min(rule.k_max, len(eligible), max(budget - reserve, 1), budget)
            if k == 0:
                break
            chosen = heapq.nlargest(k, eligible, key=lambda c: c[0])
            drafted |= {c[1] for c in chosen}
            frontier = [(c[0], c[1]) for c in chosen]
            budget -= k
        node, tokens = (), 1
        while node in conf and conf[node] is not None:  # the target's pick among the drafted children
            q = conf[node]
            u, cum = rng.random(), np.cumsum(q)
            if u >= cum[-1]:
                break
            child = node + (int(np.argmax(u < cum)),)
            if child not in drafted:
                break
            node, tokens = child, tokens + 1
        total += tokens
    return total / rounds


@pytest.mark.parametrize("rule", [AdaptRule(0.0, 0.0, 4, 12, 3, 8), AdaptRule(0.15, 0.0, 8, 24, 5, 10),
                                  AdaptRule(0.5, 0.0, 4, 16, 2, 6)])
def test_adapt_model_matches_a_naive_direct_simulation_within_2_percent(rule):
    model = simulate_adapt(PROFILE, rule, rounds=20000, seed=11)
    naive = direct_adapt(rule, rounds=6000, seed=12)
    # tolerance: the 2%, widened if the naive run's own noise needs it (sd of tokens < 2.5)
    tol = max(0.02, 4 * 2.5 / math.sqrt(6000) / model.expected_tokens)
    assert abs(naive / model.expected_tokens - 1) < tol
    assert abs(model.simulated_tokens / model.expected_tokens - 1) < 4 * model.simulated_standard_error


def test_adapt_invariants():
    rule = AdaptRule(0.1, 0.7, 4, 10, 3, 6)
    est = simulate_adapt(PROFILE, rule, rounds=4000, seed=3)
    assert np.all(est.nodes_per_level <= rule.k_max + 1e-12) and est.expected_nodes <= rule.budget + 1e-12
    assert est.expected_depth >= rule.min_depth - 1e-12 and 1 <= est.expected_tokens <= est.expected_nodes + 1
    assert est.method == "monte-carlo" and est.standard_error > 0


def test_adapt_with_a_rank_vector_is_exact_and_equals_f_of_its_tree():
    profile = AcceptanceProfile("r", (0.6, 0.2, 0.1))
    est = simulate_adapt(profile, AdaptRule(0.0, 0.0, 2, 5, 1, 4), rounds=2000)
    # top-2 by path probability per level: [r0, r1], then r0r0 (0.36), r0r1 (0.12), then r0r0r0 = 5 nodes
    tree = TreeSpec((-1, 0, 0, 1, 1, 3), (0, 0, 1, 0, 1, 0))
    assert est.method == "exact" and est.standard_error == 0
    assert est.expected_tokens == pytest.approx(expected_tokens(tree, profile))
    assert list(est.nodes_per_level) == [2, 2, 1]
    assert est.simulated_tokens == pytest.approx(est.expected_tokens, abs=4 * est.simulated_standard_error)


def test_min_depth_reserves_budget_for_deep_levels():
    est = simulate_adapt(PROFILE, AdaptRule(0.0, 0.0, 8, 20, 6, 10), rounds=500, seed=6)
    assert est.expected_depth == pytest.approx(6) and est.expected_nodes == pytest.approx(20)
    assert list(est.nodes_per_level) == [5, 8, 4, 1, 1, 1]  # 5 ranks at the root; 3 nodes kept for levels 4-6


def test_min_depth_forces_drafting_below_the_threshold():
    rule = AdaptRule(0.95, 0.0, 8, 32, 6, 10)  # almost nothing clears 0.95
    est = simulate_adapt(PROFILE, rule, rounds=2000, seed=5)
    assert est.expected_depth >= 6 - 1e-12
    assert est.nodes_per_level[5] == pytest.approx(1.0, abs=0.05)


def test_t12_duodecoding_k_rule():
    # T12: top-1 0.5, best second 0.5 -> prob_12 = 0.25; only 0.3 exceeds it -> k = 2
    assert duo_sequences([0.5, 0.3, 0.1, 0.05, 0.02, 0.01, 0.01, 0.01], 0.5, 24) == 2
    assert duo_sequences([0.3] + [0.1] * 7, 0.1, 24) == 8  # all seven exceed 0.03: raw 8, a divisor of 24
    assert duo_sequences([0.3, 0.2, 0.2, 0.2, 0.2, 0.01, 0.01, 0.01], 0.1, 24) == 4  # raw 5 -> 4
    assert duo_sequences([0.3] + [0.2] * 6 + [0.01], 0.1, 24) == 6  # raw 7 -> 6
    assert duo_sequences([0.3, 0.2, 0.2, 0.01], 0.1, 16) == 2  # raw 3 -> 2
    assert duo_sequences([0.3] + [0.2] * 7, 0.1, 12) == 6  # loop stops at 7 -> 6
    assert duo_sequences([0.3] + [0.2] * 7, 0.1, 10) == 1  # other gamma: k stays 1


def test_duodecoding_drafts_gamma_tokens():
    est = simulate_duodecoding(PROFILE, DuoRule(24), rounds=3000, seed=2)
    assert est.expected_nodes == pytest.approx(24, abs=1e-9)
    assert est.simulated_tokens == pytest.approx(est.expected_tokens, abs=4 * est.simulated_standard_error)


def test_eagle2_keeps_total_tokens_and_agrees_with_its_direct_simulation():
    est = simulate_eagle2(PROFILE, Eagle2Rule(top_k=4, depth=5, total_tokens=20), rounds=5000, seed=4)
    assert est.expected_nodes == pytest.approx(19)
    assert est.simulated_tokens == pytest.approx(est.expected_tokens, abs=4 * est.simulated_standard_error)
    # with fixed confidences the rerank keeps the 19 most probable expanded nodes: F is exact
    fixed = AcceptanceProfile("f", (0.7, 0.2, 0.05, 0.02))
    exact = simulate_eagle2(fixed, Eagle2Rule(top_k=2, depth=2, total_tokens=4), rounds=100)
    # root children 0.7, 0.2; expansions 0.49, 0.14 (under r0), 0.14, 0.04 (under r1): keep 0.7, 0.49, 0.2
    assert exact.expected_tokens == pytest.approx(1 + 0.7 + 0.49 + 0.2) and exact.method == "exact"


def test_t13_min_depth():
    # T13: T_verify 24 ms, T_draft 3 ms -> D_min = 8
    assert min_depth_for_windows(0.024, 0.003) == 8
    assert min_depth_for_windows(0.025, 0.003) == 9


CHEAP = AdaptRule(0.05, 0.0, 4, 12, 3, 8)


@pytest.mark.parametrize("simulate, rule", [(simulate_adapt, CHEAP), (simulate_eagle2, Eagle2Rule(3, 3, 8)),
                                            (simulate_duodecoding, DuoRule(12))])
def test_chunked_equals_unchunked_to_tolerance(simulate, rule):
    one = simulate(PROFILE, rule, 6000, 9, chunk_rounds=6000)
    many = simulate(PROFILE, rule, 6000, 9, chunk_rounds=450)  # 14 chunks, the last one short
    assert one.rounds == many.rounds == 6000
    se = math.hypot(one.standard_error, many.standard_error)
    assert abs(one.expected_tokens - many.expected_tokens) < 4 * se
    assert abs(one.simulated_tokens - many.simulated_tokens) < 4 * math.hypot(one.simulated_standard_error,
                                                                               many.simulated_standard_error)
    np.testing.assert_allclose(one.nodes_per_level, many.nodes_per_level, atol=0.1)
    again = simulate(PROFILE, rule, 6000, 9, chunk_rounds=450)  # deterministic for a seed
    assert again.expected_tokens == many.expected_tokens and again.simulated_tokens == many.simulated_tokens
    np.testing.assert_array_equal(again.nodes_per_level, many.nodes_per_level)


def test_chunking_keeps_exact_cases_exact():
    fixed = AcceptanceProfile("r", (0.6, 0.2, 0.1))
    one = simulate_adapt(fixed, AdaptRule(0.0, 0.0, 2, 5, 1, 4), rounds=3000, chunk_rounds=3000)
    many = simulate_adapt(fixed, AdaptRule(0.0, 0.0, 2, 5, 1, 4), rounds=3000, chunk_rounds=7)
    assert one.method == many.method == "exact"
    assert many.expected_tokens == pytest.approx(one.expected_tokens, rel=1e-12)
    np.testing.assert_array_equal(one.nodes_per_level, many.nodes_per_level)


def test_per_round_arrays_are_kept_only_on_request():
    est = simulate_adapt(PROFILE, CHEAP, rounds=1000, seed=2, chunk_rounds=300, keep_rounds=True)
    assert est.round_widths.shape[0] == est.round_tokens.shape[0] == est.round_expected.shape[0] == 1000
    assert est.round_widths.mean(axis=0) == pytest.approx(est.nodes_per_level)
    assert est.round_tokens.mean() == pytest.approx(est.simulated_tokens)
    assert simulate_adapt(PROFILE, CHEAP, rounds=1000, seed=2).round_widths.size == 0


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("simulate, rule", [(simulate_adapt, CHEAP), (simulate_eagle2, Eagle2Rule(3, 3, 8)),
                                            (simulate_duodecoding, DuoRule(12))])
def test_peak_memory_does_not_grow_with_rounds(simulate, rule):
    small = _peak_bytes(lambda: simulate(PROFILE, rule, 2000, 1, chunk_rounds=500))
    large = _peak_bytes(lambda: simulate(PROFILE, rule, 20000, 1, chunk_rounds=500))
    assert large < 1.3 * small  # 10x the rounds, the same chunks


def test_work_past_the_limit_is_refused_up_front(monkeypatch):
    from dfvg_dse.acceptance import dynamic

    per_round = dynamic.round_work(PROFILE, CHEAP).work
    monkeypatch.setattr(dynamic, "MAX_MC_WORK", 100 * per_round)
    simulate_adapt(PROFILE, CHEAP, rounds=100)
    with pytest.raises(InputError, match=r"101 rounds of Adapt x .* past the .* limit .* at most 100 rounds"):
        simulate_adapt(PROFILE, CHEAP, rounds=101)
    with pytest.raises(InputError, match="seed = -1: must be an integer >= 0"):
        simulate_eagle2(PROFILE, Eagle2Rule(3, 3, 8), rounds=10, seed=-1)


@pytest.mark.parametrize("simulate, rule", [(simulate_adapt, CHEAP), (simulate_adapt, AdaptRule(0.0, 0.0, 3, 9, 1, 8)),
                                            (simulate_eagle2, Eagle2Rule(3, 3, 8)),
                                            (simulate_duodecoding, DuoRule(12))])
def test_kept_rounds_are_bounded_by_the_levels_a_round_can_draft(simulate, rule, monkeypatch):
    from dfvg_dse.acceptance import dynamic

    levels = dynamic.round_work(PROFILE, rule).levels
    assert simulate(PROFILE, rule, 300, 4, keep_rounds=True).round_widths.shape[1] <= levels
    monkeypatch.setattr(dynamic, "MAX_KEPT_CELLS", 300 * levels)
    simulate(PROFILE, rule, 301, 4)  # nothing kept: no limit
    with pytest.raises(InputError, match=f"keeping 301 rounds x up to {levels} levels .* at most 300 rounds"):
        simulate(PROFILE, rule, 301, 4, keep_rounds=True)


def test_vectorised_duodecoding_k_matches_the_rule():
    rng = np.random.default_rng(0)
    first = np.sort(rng.random((500, 8)), axis=1)[:, ::-1] * rng.random((500, 1))
    second = rng.random(500)
    for gamma in (10, 12, 16, 24):
        expected = [duo_sequences(f, s, gamma) for f, s in zip(first, second)]
        assert list(dynamic_module._duo_sequences_many(first, second, gamma)) == expected
