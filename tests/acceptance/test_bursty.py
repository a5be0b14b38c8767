"""The two-state (bursty) acceptance model: with equal states it is the i.i.d. rank model, whose
expected tokens are exact (acceptance.expected); fitted on rounds simulated from a known model it
recovers that model."""

import numpy as np
import pytest

from dfvg_dse.acceptance.bursty import BurstyProfile, fit_bursty, simulate_rounds
from dfvg_dse.acceptance.expected import expected_tokens
from dfvg_dse.specs import AcceptanceProfile
from dfvg_dse.tree import parse_tree_spec


@pytest.mark.parametrize("spec", ["chain:4", "kary:2x2", "seq:2x3"])
def test_equal_states_give_the_exact_iid_expectation(spec):
    probs = (0.7, 0.12, 0.05)
    tree = parse_tree_spec(spec)
    tokens, hit = simulate_rounds(tree, BurstyProfile("iid", (probs, probs), (0.9, 0.6)), rounds=200000)
    assert tokens == pytest.approx(expected_tokens(tree, AcceptanceProfile("iid", probs)), rel=0.01)
    depth = max(tree.depths)  # these trees' rank-0 path runs to full depth: hit = p0^(depth + 1)
    assert hit == pytest.approx(probs[0] ** (depth + 1), rel=0.03)


def simulated_chain_traces(profile: BurstyProfile, gamma: int, runs: int, rounds: int, seed: int) -> list[list[dict]]:
    """Chain rounds drawn from the two-state process (independently of the code under test)."""
    rng = np.random.default_rng(seed)
    parents, ranks = list(range(-1, gamma)), [0] * (gamma + 1)
    out = []
    for _ in range(runs):
        state, trace = int(rng.random() < 0.5), []
        for _ in range(rounds):
            accepted = [0]
            while True:
                top = rng.random() < profile.rank_probs[state][0]
                at_leaf = len(accepted) == gamma + 1
                if not (rng.random() < profile.stay[state]):
                    state = 1 - state
                if at_leaf or not top:
                    break
                accepted.append(len(accepted))
            trace.append({"parents": parents, "ranks": ranks, "accepted": accepted})
        out.append(trace)
    return out


def test_fit_recovers_a_known_two_state_process():
    truth = BurstyProfile("truth", ((0.95,), (0.3,)), (0.97, 0.9))
    traces = simulated_chain_traces(truth, 4, runs=40, rounds=60, seed=3)
    fit = fit_bursty(traces, "fit", "test", ranks=1)
    assert fit.rank_probs[0][0] == pytest.approx(0.95, abs=0.03)
    assert fit.rank_probs[1][0] == pytest.approx(0.3, abs=0.08)
    assert fit.stay[0] == pytest.approx(0.97, abs=0.03) and fit.stay[1] == pytest.approx(0.9, abs=0.06)
    tree = parse_tree_spec("chain:4")
    measured = np.mean([len(r["accepted"]) for t in traces for r in t])
    assert simulate_rounds(tree, fit)[0] == pytest.approx(measured, rel=0.03)
