"""Leviathan et al. 2023 formulas against the public test vectors T1-T3 (ICML 2023, arXiv 2211.17192: Eq. 1, Thm 3.8, 3.11; Tables 1, 4)."""

import numpy as np
import pytest

from dfvg_dse.acceptance.chain import (expected_tokens_chain, ops_factor_chain, optimal_gamma, speedup_chain,
                                       speedup_lower_bound_gamma1)


@pytest.mark.parametrize("alpha, gamma, expected", [(0.8, 4, 3.3616), (0.8, 5, 3.68928), (0.75, 7, 3.599548),
                                                    (0.6, 5, 2.38336)])
def test_t1_expected_tokens(alpha, gamma, expected):
    # T1: Leviathan Eq. 1
    assert expected_tokens_chain(alpha, gamma) == pytest.approx(expected, abs=5e-7)


def test_expected_tokens_by_simulation():
    # independent check: simulate i.i.d. acceptance of gamma tokens plus the bonus token
    rng = np.random.default_rng(0)
    accepted = rng.random((200_000, 5)) < 0.7
    tokens = np.argmin(np.hstack([accepted, np.zeros((200_000, 1), bool)]), axis=1) + 1
    assert tokens.mean() == pytest.approx(float(expected_tokens_chain(0.7, 5)), rel=0.01)
    assert expected_tokens_chain(1.0, 5) == 6


@pytest.mark.parametrize("alpha, gamma, ops, speed", [(0.6, 2, 1.53, 1.96), (0.7, 3, 1.58, 2.53), (0.8, 2, 1.23, 2.44),
                                                      (0.8, 5, 1.63, 3.69), (0.9, 2, 1.11, 2.71), (0.9, 10, 1.60, 6.86)])
def test_t2_table1(alpha, gamma, ops, speed):
    # T2: Leviathan Table 1 (c = c_hat = 0), printed to 2 decimals
    assert ops_factor_chain(alpha, gamma, 0.0) == pytest.approx(ops, abs=0.005)
    assert speedup_chain(alpha, gamma, 0.0) == pytest.approx(speed, abs=0.005)


TABLE4 = [(7, 0.75, 0.02, 3.2, 3.157), (7, 0.80, 0.04, 3.3, 3.251), (7, 0.82, 0.11, 2.5, 2.497),
          (7, 0.62, 0.02, 2.3, 2.258), (5, 0.68, 0.04, 2.4, 2.347), (3, 0.71, 0.11, 2.0, 1.934),
          (5, 0.65, 0.02, 2.4, 2.402), (5, 0.73, 0.04, 2.6, 2.619), (3, 0.74, 0.11, 2.0, 2.025),
          (5, 0.53, 0.02, 1.9, 1.891), (3, 0.55, 0.04, 1.8, 1.803), (3, 0.56, 0.11, 1.6, 1.541)]


@pytest.mark.parametrize("gamma, alpha, c, printed, thm", TABLE4)
def test_t2_table4(gamma, alpha, c, printed, thm):
    # T2: Leviathan Table 4; Thm 3.8 to 3 decimals exactly, the printed Exp column to +-0.1
    s = float(speedup_chain(alpha, gamma, c))
    assert s == pytest.approx(thm, abs=5e-4)
    assert abs(s - printed) <= 0.1 + 1e-9


T3 = {0.5: [(5, 1.8750), (3, 1.6304), (2, 1.4583), (1, 1.2500), (1, 1.0000)],
      0.6: [(7, 2.2972), (4, 1.9213), (3, 1.6738), (2, 1.4000), (1, 1.0667)],
      0.7: [(9, 2.9717), (6, 2.3529), (4, 1.9808), (3, 1.5831), (1, 1.1333)],
      0.75: [(11, 3.4895), (7, 2.6663), (5, 2.1921), (3, 1.7090), (1, 1.1667)],
      0.8: [(14, 4.2316), (8, 3.0921), (6, 2.4696), (4, 1.8676), (2, 1.2200)],
      0.9: [(24, 7.4856), (13, 4.6741), (10, 3.4309), (7, 2.3731), (3, 1.3756)]}


@pytest.mark.parametrize("alpha", T3)
def test_t3_optimal_gamma_with_tie_rule(alpha):
    # T3: argmax of Thm 3.8 over gamma = 1..50; the (0.5, 0.2) tie between 1 and 2 returns 1
    for c, (gamma, speed) in zip([0.01, 0.05, 0.1, 0.2, 0.5], T3[alpha]):
        got_gamma, got_speed = optimal_gamma(alpha, c)
        assert got_gamma == gamma and got_speed == pytest.approx(speed, abs=5e-5)


def test_tie_is_real_and_corollary_bound():
    assert speedup_chain(0.5, 1, 0.2) == pytest.approx(speedup_chain(0.5, 2, 0.2), rel=1e-12)
    assert speedup_lower_bound_gamma1(0.75, 0.02) == pytest.approx(1.7157, abs=5e-5)
    assert speedup_chain(0.75, 1, 0.02) >= speedup_lower_bound_gamma1(0.75, 0.02) - 1e-12
