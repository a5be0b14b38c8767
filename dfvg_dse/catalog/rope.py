"""Reader of a Hugging Face config's rotary embedding, in both styles transformers reads:

- transformers 5 writes `"rope_parameters": {"rope_type": ..., "rope_theta": ..., "factor": ...}`;
- transformers 4 wrote a top-level `rope_theta` and `"rope_scaling": {"rope_type" (or the older
  "type"): ..., "factor": ...}` (null for plain RoPE).

Precedence follows transformers 5.24 (configuration_utils / modeling_rope_utils): a base inside the
section beats the top-level `rope_theta`, which beats 10,000; a top-level
`original_max_position_embeddings` beats the section's, which defaults to
`max_position_embeddings`. Two sections that disagree are refused instead of picking one.
Problems are one DataError line naming the file and the key.
"""

from __future__ import annotations

import math
from pathlib import Path

from dfvg_dse.catalog.errors import _MISSING, DataError
from dfvg_dse.specs import SpecError
from dfvg_dse.specs.rope import NEEDS_FACTOR, NEEDS_ORIGINAL, ROPE_TYPES, RopeSpec

DEFAULT_THETA = 10000.0  # transformers' RotaryEmbeddingConfigMixin.default_theta (no family overrides it)
SECTIONS = ("rope_parameters", "rope_scaling")  # transformers 5, transformers 4


def _rope_type(section: dict) -> object:
    kind = section.get("rope_type", section.get("type"))  # "type" is transformers 4's older key
    return "default" if kind is None else kind


def _section(path, config: dict) -> tuple[str, dict]:
    """(key, table) of the config's RoPE parameters; an empty table for plain RoPE."""
    found = {}
    for key in SECTIONS:
        value = config.get(key)
        if value is not None and not isinstance(value, dict):
            raise DataError(path, f"config.{key}", value, "must be a table of RoPE parameters or null")
        if value:
            found[key] = value
    if len(found) == 2:
        v5, v4 = found["rope_parameters"], found["rope_scaling"]
        shared = set(v5) & set(v4) - {"type", "rope_type"}
        if _rope_type(v5) != _rope_type(v4) or any(v5[k] != v4[k] for k in shared):
            raise DataError(path, "config.rope_scaling", v4, "disagrees with config.rope_parameters (transformers 5 "
                            "writes rope_parameters, transformers 4 rope_scaling): keep one")
    key = next(iter(found), "rope_parameters")
    section = found.get(key, {})
    nested = [k for k, v in section.items() if isinstance(v, dict)]
    if nested:
        raise DataError(path, f"config.{key}.{nested[0]}", section[nested[0]],
                        "per-layer-type RoPE parameters are not supported for this family")
    return key, section


def _number(path, field: str, value: object, minimum: float, strict: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
        value > minimum if strict else value >= minimum)
    if not ok:
        raise DataError(path, field, value, f"must be a number {'>' if strict else '>='} {minimum:g}")
    return float(value)


def rope_spec_from_hf_config(path: Path | str, config: dict, head_dim: int, max_positions: int) -> RopeSpec:
    """The RopeSpec a llama, mistral, qwen2 or qwen3 config.json asks for (see the module docstring)."""
    key, section = _section(path, config)

    def field(name: str) -> str:
        return f"config.{key}.{name}"

    def get(name: str, default: object = _MISSING) -> object:
        value = section.get(name)
        return default if value is None else value

    kind = _rope_type(section)
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        raise DataError(path, field("rope_type"), kind, f"allowed: {', '.join(ROPE_TYPES)} "
                        "(transformers' rope types the reference engine implements)")
    if "rope_theta" in section and section["rope_theta"] is not None:
        theta = _number(path, field("rope_theta"), section["rope_theta"], 0.0, strict=True)
    elif config.get("rope_theta") is not None:
        theta = _number(path, "config.rope_theta", config["rope_theta"], 0.0, strict=True)
    else:
        theta = DEFAULT_THETA
    for where, value in ((field("partial_rotary_factor"), section.get("partial_rotary_factor")),
                         ("config.partial_rotary_factor", config.get("partial_rotary_factor"))):
        if value is not None and value != 1:
            raise DataError(path, where, value, "must be 1: llama, mistral and qwen layers rotate the whole head")
    fields: dict = {"rope_type": kind, "theta": theta}
    if kind == "dynamic":
        fields["max_positions"] = max_positions
    if kind == "default":
        return _spec(path, key, fields)
    original = max_positions
    if kind in NEEDS_ORIGINAL:
        if config.get("original_max_position_embeddings") is not None:  # transformers gives it priority
            where, original = "config.original_max_position_embeddings", config["original_max_position_embeddings"]
        else:
            where, original = field("original_max_position_embeddings"), get("original_max_position_embeddings",
                                                                             max_positions)
        if isinstance(original, bool) or not isinstance(original, int) or original < 1:
            raise DataError(path, where, original, "must be a positive integer")
        fields["original_max_positions"] = original
    factor = get("factor")
    if factor is _MISSING:
        if kind in NEEDS_FACTOR:
            raise DataError(path, field("factor"), _MISSING, f"required by rope_type '{kind}'")
        factor = max_positions / original  # yarn, longrope: transformers' implicit factor
    fields["factor"] = _number(path, field("factor"), factor, 1.0)
    if kind == "dynamic" and head_dim <= 2:
        raise DataError(path, "config.head_dim", head_dim, "dynamic NTK needs head_dim > 2")
    if kind == "llama3":
        for name in ("low_freq_factor", "high_freq_factor"):
            fields[name] = _number(path, field(name), get(name), 0.0, strict=True)
    if kind == "yarn":
        # transformers reads `beta_fast or 32`, `beta_slow or 1`: null and 0 both mean the default
        fields["beta_fast"] = _number(path, field("beta_fast"), section.get("beta_fast") or 32.0, 0.0, strict=True)
        fields["beta_slow"] = _number(path, field("beta_slow"), section.get("beta_slow") or 1.0, 0.0, strict=True)
        for name in ("mscale", "mscale_all_dim"):
            fields[name] = _number(path, field(name), get(name, 0.0), 0.0)
        truncate = get("truncate", True)
        if not isinstance(truncate, bool):
            raise DataError(path, field("truncate"), truncate, "must be true or false")
        fields["truncate"] = truncate
    if kind in ("yarn", "longrope") and get("attention_factor", None) is not None:
        fields["attention_factor"] = _number(path, field("attention_factor"), section["attention_factor"], 0.0,
                                             strict=True)
    if kind == "longrope":
        for name in ("short_factor", "long_factor"):
            values = get(name)
            if not isinstance(values, list) or len(values) != head_dim // 2:
                raise DataError(path, field(name), values,
                                f"must be a list of head_dim / 2 = {head_dim // 2} numbers")
            fields[name] = tuple(_number(path, f"{field(name)}[{i}]", v, 0.0, strict=True)
                                 for i, v in enumerate(values))
    return _spec(path, key, fields)


def _spec(path, key: str, fields: dict) -> RopeSpec:
    try:
        return RopeSpec(**fields)
    except SpecError as err:  # a combination the checks above let through (high <= low frequency factor)
        # RopeSpec names its fields by their config keys
        top_level = err.field == "max_position_embeddings"
        where = f"config.{err.field}" if top_level else f"config.{key}.{err.field}"
        raise DataError(path, where, err.value, err.allowed) from None
