"""Verification rules against T4/T5 and by exact enumeration of the output distribution."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dfvg_dse.acceptance.verify import (greedy_acceptance, sequoia_acceptance, sequoia_output, single_token_acceptance,
                                        specinfer_acceptance, specinfer_output)


def test_t4_single_token():
    assert single_token_acceptance([0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]) == pytest.approx(0.6)


T5 = [([1, 0], [.5, .5], 2, [0.5, 0.25], [0.5, 0.5]),
      ([.6, .4], [.6, .4], 1, [1.0], [1.0]),
      ([.4, .3, .2, .1], [.1, .2, .3, .4], 4, [0.6, 0.12, 0.048, 0.0232], [0.6, 0.164286, 0.076012, 0.159702]),
      ([.7, .2, .1, 0], [.2, .2, .3, .3], 3, [0.5, 0.1, 0.08], [0.5, 0.142857, 0.164286])]


@pytest.mark.parametrize("p, q, k, specinfer, sequoia", T5)
def test_t5_vectors(p, q, k, specinfer, sequoia):
    # T5 (SpecInfer arXiv 2305.09781; Sequoia arXiv 2402.12374, Alg. 2): per-candidate acceptance by exact enumeration
    np.testing.assert_allclose(specinfer_acceptance(p, q, k), specinfer, atol=5e-7)
    np.testing.assert_allclose(sequoia_acceptance(p, q, k), sequoia, atol=5e-7)


pairs = st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=5).filter(
    lambda v: sum(a for a, _ in v) > 0.1 and sum(b for _, b in v) > 0.1)


@given(pairs, st.integers(1, 4))
def test_both_rules_are_lossless(pq, k):
    p, q = (np.array(column) for column in zip(*pq))
    p, q = p / p.sum(), q / q.sum()
    np.testing.assert_allclose(specinfer_output(p, q, k), p, atol=1e-9)
    np.testing.assert_allclose(sequoia_output(p, q, k), p, atol=1e-9)
    # optimal transport at k = 1; without replacement never accepts less than with it
    assert specinfer_acceptance(p, q, 1)[0] == pytest.approx(single_token_acceptance(p, q))
    assert sequoia_acceptance(p, q, k).sum() >= specinfer_acceptance(p, q, k).sum() - 1e-9


def test_sequoia_rule_by_monte_carlo():
    # an independent simulation of Sequoia's Alg. 2 with sampling agrees with the enumeration
    rng = np.random.default_rng(1)
    p, q, k = np.array([.4, .3, .2, .1]), np.array([.1, .2, .3, .4]), 3
    hits = np.zeros(k + 1)
    for _ in range(40_000):
        r, d, rejected = p.copy(), q.copy(), np.zeros(4, bool)
        for j in range(k):
            s = rng.choice(4, p=d)
            if rng.random() < min(1.0, r[s] / d[s]):
                hits[j] += 1
                break
            r = np.maximum(r - d, 0)
            r /= r.sum()
            rejected[s] = True
            d[s] = 0
            d = d / d.sum() if d.sum() > 0 else (~rejected) / (~rejected).sum()
        else:
            hits[k] += 1
    np.testing.assert_allclose(hits[:k] / 40_000, sequoia_acceptance(p, q, k), atol=0.01)


def test_greedy_accepts_the_target_argmax():
    np.testing.assert_array_equal(greedy_acceptance([0.1, 0.6, 0.3], [0.5, 0.2, 0.3], 3), [0, 0, 1])
