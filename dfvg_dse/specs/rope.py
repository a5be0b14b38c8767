"""Rotary position embedding (RoPE) of a checkpoint: the base and the context-extension scaling.

The scalings are those transformers 5 runs for llama, mistral, qwen2 and qwen3 (its
`rope_parameters`, transformers 4's `rope_scaling`): linear position interpolation (kaiokendev
2023), dynamic NTK (bloc97 and emozilla 2023), Llama 3.1's frequency-band interpolation
(`llama3`), YaRN (Peng et al., arXiv 2309.00071) and LongRoPE (Ding et al., arXiv 2402.13753).
The catalog reads the config into a RopeSpec; the reference engine turns it into frequencies
(reference/rope.py). Lengths and positions are token counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dfvg_dse.specs.hardware import SpecError

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")
# frequencies that depend on the length of the sequence a forward runs at, not only on the config
LENGTH_DEPENDENT = ("dynamic", "longrope")
# types whose factor must be given (yarn and longrope derive one from the two context lengths)
NEEDS_FACTOR = ("linear", "dynamic", "llama3")
NEEDS_ORIGINAL = ("llama3", "yarn", "longrope")


def _positive(name: str, value: object, minimum: float = 0.0, strict: bool = True) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
        value > minimum if strict else value >= minimum)
    if not ok:
        raise SpecError(name, value, f"must be a number {'>' if strict else '>='} {minimum:g}")


@dataclass(frozen=True)
class RopeSpec:
    """What a rotary embedding needs beyond head_dim. Defaults are transformers' (10,000 base,
    YaRN's beta_fast 32 and beta_slow 1, llama3's 1 and 4); fields a type does not use are ignored."""

    rope_type: str = "default"
    theta: float = 10000.0  # rope_theta: the base wavelength of the lowest dimension pair
    factor: float = 1.0  # context extension factor (every type but default)
    max_positions: int = 0  # max_position_embeddings: dynamic NTK's unscaled length (0: unset)
    original_max_positions: int = 0  # pretraining context of llama3, yarn, longrope (0: unset)
    low_freq_factor: float = 1.0  # llama3: wavelengths above original / low are divided by factor
    high_freq_factor: float = 4.0  # llama3: wavelengths below original / high are kept
    beta_fast: float = 32.0  # yarn: rotations over the original context above which a pair extrapolates
    beta_slow: float = 1.0  # yarn: ... below which it interpolates
    truncate: bool = True  # yarn: round the ramp's ends to whole pairs
    mscale: float = 0.0  # yarn (DeepSeek form): 0 means unset
    mscale_all_dim: float = 0.0
    attention_factor: float | None = None  # yarn, longrope: cos and sin multiplier; None: derived from factor
    short_factor: tuple[float, ...] = ()  # longrope: per-pair divisors within the original context
    long_factor: tuple[float, ...] = ()  # longrope: ... beyond it

    def __post_init__(self) -> None:
        if self.rope_type not in ROPE_TYPES:
            raise SpecError("rope_type", self.rope_type, f"allowed: {', '.join(ROPE_TYPES)}")
        _positive("rope_theta", self.theta)
        if self.rope_type != "default":
            _positive("factor", self.factor, 1.0, strict=False)
        if self.rope_type == "dynamic":
            _positive("max_position_embeddings", self.max_positions, 1.0, strict=False)
        if self.rope_type in NEEDS_ORIGINAL:
            _positive("original_max_position_embeddings", self.original_max_positions, 1.0, strict=False)
        if self.rope_type == "llama3":
            _positive("low_freq_factor", self.low_freq_factor)
            if not self.high_freq_factor > self.low_freq_factor:
                raise SpecError("high_freq_factor", self.high_freq_factor,
                                f"must be > low_freq_factor ({self.low_freq_factor})")
        if self.attention_factor is not None:
            _positive("attention_factor", self.attention_factor)
        if self.rope_type == "longrope":
            for name in ("short_factor", "long_factor"):
                values = getattr(self, name)
                if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0
                                     for v in values):
                    raise SpecError(name, values, "must be a non-empty list of numbers > 0")
            if len(self.short_factor) != len(self.long_factor):
                raise SpecError("long_factor", len(self.long_factor),
                                f"must have as many entries as short_factor ({len(self.short_factor)})")

    @property
    def length_dependent(self) -> bool:
        """True when a forward's frequencies depend on the sequence length it runs at."""
        return self.rope_type in LENGTH_DEPENDENT
