"""Rotary embedding tables for the reference engine: RoPE (Su et al., arXiv 2104.09864) and the
context-extension scalings of specs.rope, computed as transformers 5 does (modeling_rope_utils),
in float64.

D is head_dim and P = D / 2 the number of rotated pairs; pair i turns inv_freq[i] radians per
position. Each scaling below is a pure function of the config and, for dynamic NTK and LongRoPE,
of the sequence length L a forward runs at (transformers: the largest position id + 1).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from dfvg_dse.specs.rope import RopeSpec


def default_inv_freq(theta: float, dim: int) -> np.ndarray:
    """(P,) theta^(-2i/D): RoPE's geometric frequencies."""
    return 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def linear_inv_freq(theta: float, dim: int, factor: float) -> np.ndarray:
    """(P,) position interpolation: positions divided by factor, i.e. every frequency."""
    return default_inv_freq(theta, dim) / factor


def dynamic_inv_freq(theta: float, dim: int, factor: float, max_positions: int, length: int) -> np.ndarray:
    """(P,) dynamic NTK: past max_positions the base grows with L, so the lowest frequency still
    spans the sequence; at or below it this is plain RoPE."""
    length = max(length, max_positions)
    base = theta * (factor * length / max_positions - (factor - 1)) ** (dim / (dim - 2))
    return default_inv_freq(base, dim)


def llama3_inv_freq(theta: float, dim: int, factor: float, low_freq_factor: float, high_freq_factor: float,
                    original: int) -> np.ndarray:
    """(P,) Llama 3.1: pairs whose wavelength exceeds original / low_freq_factor are interpolated
    by factor, those shorter than original / high_freq_factor are kept, and the band between
    blends the two linearly in original / wavelength (continuous at both edges)."""
    inv_freq = default_inv_freq(theta, dim)
    wavelength = 2 * math.pi / inv_freq  # (P,) positions per turn
    smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)  # 0 slow edge, 1 fast
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    kept = np.where(wavelength < original / high_freq_factor, inv_freq, blended)
    return np.where(wavelength > original / low_freq_factor, inv_freq / factor, kept)


def yarn_inv_freq(theta: float, dim: int, factor: float, original: int, beta_fast: float, beta_slow: float,
                  truncate: bool) -> np.ndarray:
    """(P,) YaRN's "NTK-by-parts" (Peng et al. 2023, eq. 18-20): pairs that turn more than beta_fast
    times over the original context keep their frequency, those below beta_slow turns are
    interpolated by factor, with a linear ramp over the pairs between."""

    def pair_turning(turns: float) -> float:  # the (fractional) pair index that turns `turns` times
        return dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low, high = pair_turning(beta_fast), pair_turning(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)  # (P,) 1: interpolate
    inv_freq = default_inv_freq(theta, dim)
    return inv_freq * (1 - ramp) + inv_freq / factor * ramp


def yarn_attention_factor(factor: float, mscale: float = 0.0, mscale_all_dim: float = 0.0) -> float:
    """YaRN's temperature: 0.1 ln(s) + 1 (Peng et al. 2023, eq. 22), or DeepSeek's ratio of two
    such terms when both mscale and mscale_all_dim are set."""

    def m(scale: float, k: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0

    if mscale and mscale_all_dim:
        return m(factor, mscale) / m(factor, mscale_all_dim)
    return m(factor)


def longrope_inv_freq(theta: float, dim: int, short_factor, long_factor, original: int, length: int) -> np.ndarray:
    """(P,) LongRoPE: per-pair divisors, the long set once L passes the original context."""
    divisors = np.asarray(long_factor if length > original else short_factor, dtype=np.float64)
    return default_inv_freq(theta, dim) / divisors


def longrope_attention_factor(factor: float, original: int) -> float:
    """LongRoPE's default scale of cos and sin: sqrt(1 + ln(factor) / ln(original))."""
    return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))


def inverse_frequencies(rope: RopeSpec, dim: int, length: int = 0) -> np.ndarray:
    """(P,) the frequencies of `rope` for a forward at sequence length `length`."""
    kind = rope.rope_type
    if kind == "linear":
        return linear_inv_freq(rope.theta, dim, rope.factor)
    if kind == "dynamic":
        return dynamic_inv_freq(rope.theta, dim, rope.factor, rope.max_positions, length)
    if kind == "llama3":
        return llama3_inv_freq(rope.theta, dim, rope.factor, rope.low_freq_factor, rope.high_freq_factor,
                               rope.original_max_positions)
    if kind == "yarn":
        return yarn_inv_freq(rope.theta, dim, rope.factor, rope.original_max_positions, rope.beta_fast,
                             rope.beta_slow, rope.truncate)
    if kind == "longrope":
        return longrope_inv_freq(rope.theta, dim, rope.short_factor, rope.long_factor, rope.original_max_positions,
                                 length)
    return default_inv_freq(rope.theta, dim)


def attention_scaling(rope: RopeSpec) -> float:
    """The factor transformers multiplies cos and sin by (so q.k by its square): yarn and longrope."""
    if rope.rope_type == "yarn":
        return rope.attention_factor or yarn_attention_factor(rope.factor, rope.mscale, rope.mscale_all_dim)
    if rope.rope_type == "longrope":
        return rope.attention_factor or longrope_attention_factor(rope.factor, rope.original_max_positions)
    return 1.0


def _length_key(rope: RopeSpec, length: int) -> int:
    """The smallest length giving the same frequencies as `length` (one cache entry per table)."""
    if rope.rope_type == "dynamic":
        return max(length, rope.max_positions)
    if rope.rope_type == "longrope":
        return rope.original_max_positions + (length > rope.original_max_positions)
    return 0


@lru_cache(maxsize=64)
def _pair_tables(rope: RopeSpec, dim: int, length: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(D,) frequencies with both halves equal, (D,) rotate_half signs times the attention
    scaling, and the scaling itself."""
    inv_freq = inverse_frequencies(rope, dim, length)
    scale = attention_scaling(rope)
    return np.concatenate([inv_freq, inv_freq]), np.repeat([-scale, scale], dim // 2), scale


def rope_tables(rope: RopeSpec, positions: np.ndarray, dim: int, dtype, per_token: bool = False):
    """cos and sin (T, D) at integer positions (T,), times the attention scaling, the sin already
    signed for rotate_half: rotate_half(x) * sin == x[..., swap] * signed_sin.

    A length-dependent scaling runs every token at the forward's length, max(positions) + 1, as
    transformers does for a prefill or a decoding step; with `per_token` each token runs at its
    own position + 1, the length autoregressive decoding would have given it (tree forwards: this
    keeps verification lossless)."""
    positions = np.asarray(positions)
    if not rope.length_dependent:
        frequencies, signs, scale = _pair_tables(rope, dim, 0)  # (D,)
    else:
        lengths = positions + 1 if per_token else np.full(len(positions), positions.max() + 1)
        keys = [_length_key(rope, int(n)) for n in lengths]
        tables = {key: _pair_tables(rope, dim, key) for key in set(keys)}
        frequencies = np.stack([tables[key][0] for key in keys])  # (T, D)
        _, signs, scale = tables[keys[0]]
    angles = positions.astype(np.float64)[:, None] * frequencies  # (T, D): both halves share frequencies
    cos = np.cos(angles)
    if scale != 1.0:
        cos *= scale
    return cos.astype(dtype), (np.sin(angles) * signs).astype(dtype)
