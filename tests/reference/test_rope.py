"""The RoPE scalings of reference/rope.py from their definitions (transformers' comparisons are in
test_hf_fixtures.py): what each keeps, divides and blends, where the length-dependent ones switch,
and the attention factors."""

import math

import numpy as np
import pytest

from dfvg_dse.reference.rope import (default_inv_freq, dynamic_inv_freq, inverse_frequencies, llama3_inv_freq,
                                     longrope_attention_factor, rope_tables, yarn_attention_factor, yarn_inv_freq)
from dfvg_dse.specs import SpecError
from dfvg_dse.specs.rope import RopeSpec

D = 64  # 32 pairs, wavelengths from 2 pi to about 2 pi * 7,500 at base 10,000


def test_default_and_linear():
    inv = default_inv_freq(10000.0, D)
    assert inv.shape == (D // 2,) and inv[0] == 1.0 and inv[-1] == pytest.approx(10000.0 ** (-(D - 2) / D))
    linear = inverse_frequencies(RopeSpec("linear", factor=4.0), D)
    np.testing.assert_allclose(linear, inv / 4)


def test_dynamic_ntk_is_plain_rope_within_the_context_and_grows_its_base_past_it():
    plain = default_inv_freq(10000.0, D)
    for length in (1, 100, 2048):
        np.testing.assert_array_equal(dynamic_inv_freq(10000.0, D, 4.0, 2048, length), plain)
    base = 10000.0 * (4.0 * 4096 / 2048 - 3) ** (D / (D - 2))  # factor * L / max - (factor - 1) = 5
    np.testing.assert_allclose(dynamic_inv_freq(10000.0, D, 4.0, 2048, 4096), default_inv_freq(base, D))
    lowest = [dynamic_inv_freq(10000.0, D, 4.0, 2048, n)[-1] for n in (2049, 3000, 8000)]
    assert lowest[0] < plain[-1] and lowest == sorted(lowest, reverse=True)


def test_llama3_keeps_fast_pairs_divides_slow_ones_and_blends_between():
    inv = default_inv_freq(500000.0, D)
    got = llama3_inv_freq(500000.0, D, 8.0, 1.0, 4.0, 8192)
    wavelength = 2 * math.pi / inv
    fast, slow = wavelength < 8192 / 4, wavelength > 8192 / 1
    middle = ~fast & ~slow
    assert fast.any() and slow.any() and middle.any()
    np.testing.assert_array_equal(got[fast], inv[fast])
    np.testing.assert_allclose(got[slow], inv[slow] / 8)
    assert np.all((got[middle] > inv[middle] / 8) & (got[middle] < inv[middle]))
    # continuous: at the band's edges the blend equals the neighbouring rule
    edge = llama3_inv_freq(500000.0, D, 8.0, 1.0, 4.0, 2 * math.pi / inv[10])  # pair 10 exactly at the slow edge
    assert edge[10] == pytest.approx(inv[10] / 8)


def test_yarn_extrapolates_fast_pairs_interpolates_slow_ones_with_a_ramp():
    inv = default_inv_freq(10000.0, D)
    got = yarn_inv_freq(10000.0, D, 4.0, 4096, 32.0, 1.0, True)
    ratio = inv / got  # 1: extrapolated, 4: interpolated
    assert ratio[0] == pytest.approx(1) and ratio[-1] == pytest.approx(4)
    assert np.all(np.diff(ratio) >= -1e-12) and np.any((ratio > 1.01) & (ratio < 3.99))
    # the pair that turns beta_fast = 32 times over 4096 positions: dim ln(4096 / (32 2 pi)) / (2 ln 10000)
    low = math.floor(D * math.log(4096 / (32 * 2 * math.pi)) / (2 * math.log(10000.0)))
    np.testing.assert_allclose(ratio[:low + 1], 1.0)
    assert ratio[low + 1] > 1


def test_attention_factors():
    assert yarn_attention_factor(4.0) == pytest.approx(0.1 * math.log(4) + 1)
    assert yarn_attention_factor(1.0) == 1.0
    assert yarn_attention_factor(40.0, 1.0, 1.0) == pytest.approx(1.0)  # DeepSeek-V3's mscale = mscale_all_dim
    assert yarn_attention_factor(40.0, 1.0, 0.5) == pytest.approx((0.1 * math.log(40) + 1) / (0.05 * math.log(40) + 1))
    assert longrope_attention_factor(32.0, 4096) == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    cos, sin = rope_tables(RopeSpec("yarn", factor=4.0, original_max_positions=64), np.arange(5), 8, np.float64)
    assert np.allclose(cos[0], 0.1 * math.log(4) + 1)  # position 0: cos = 1 times the factor
    given = rope_tables(RopeSpec("yarn", factor=4.0, original_max_positions=64, attention_factor=0.7), [0], 8, float)
    assert np.allclose(given[0], 0.7)


def test_longrope_switches_to_the_long_factors_past_the_original_context():
    rope = RopeSpec("longrope", factor=4.0, original_max_positions=32, short_factor=(1.0,) * 4, long_factor=(2.0,) * 4)
    plain = default_inv_freq(10000.0, 8)
    np.testing.assert_allclose(inverse_frequencies(rope, 8, 32), plain)
    np.testing.assert_allclose(inverse_frequencies(rope, 8, 33), plain / 2)


def test_a_forward_runs_at_its_length_and_a_tree_at_each_nodes():
    rope = RopeSpec("dynamic", factor=2.0, max_positions=16)
    positions = np.arange(14, 20)
    chain_cos, _ = rope_tables(rope, positions, 8, np.float64)
    tree_cos, tree_sin = rope_tables(rope, positions, 8, np.float64, per_token=True)
    for row, position in enumerate(positions):
        single_cos, single_sin = rope_tables(rope, [position], 8, np.float64)  # decoding it alone
        np.testing.assert_array_equal(tree_cos[row], single_cos[0])
        np.testing.assert_array_equal(tree_sin[row], single_sin[0])
    angles = positions[:, None] * np.tile(dynamic_inv_freq(10000.0, 8, 2.0, 16, 20), 2)  # all at length 20
    np.testing.assert_allclose(chain_cos, np.cos(angles))
    static = RopeSpec("linear", factor=2.0)
    np.testing.assert_array_equal(rope_tables(static, positions, 8, float)[1],
                                  rope_tables(static, positions, 8, float, per_token=True)[1])


@pytest.mark.parametrize("fields, field", [
    (dict(rope_type="ntk"), "rope_type"), (dict(theta=0.0), "rope_theta"),
    (dict(rope_type="linear", factor=0.5), "factor"),
    (dict(rope_type="dynamic", factor=2.0), "max_position_embeddings"),
    (dict(rope_type="yarn", factor=2.0), "original_max_position_embeddings"),
    (dict(rope_type="longrope", original_max_positions=8, short_factor=(1.0,), long_factor=(1.0, 2.0)), "long_factor"),
])
def test_rope_spec_refuses_what_no_scaling_could_run(fields, field):
    with pytest.raises(SpecError) as err:
        RopeSpec(**fields)
    assert err.value.field == field
