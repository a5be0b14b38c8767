"""Reader and document of engine profiles, hwdb/engines/NAME.toml (docs/engines.md).

A profile is written by `dfvg-dse engines fit` (validation/engines.py fits it to
hwdb/measurements); `fp16_accumulate`, `mma_sync_only` and `per_head_attention` are facts about the
engine's kernels, read from its code, never fitted, kept from the file a fit replaces with their own
sources.
"""

from __future__ import annotations

import math
from pathlib import Path

from dfvg_dse.catalog.errors import _MISSING, DataError
from dfvg_dse.specs.engines import CLASSES, EngineProfile, KernelEfficiency
from dfvg_dse.specs.hardware import SpecError

# Facts about an engine's kernels, read from its code, never fitted: { value = true|false, source = "..." }
FACTS = ("fp16_accumulate", "mma_sync_only")
# The KV-cache classes whose attention kernel runs per query head: { kv_classes = [...], source = "..." }
PER_HEAD = "per_head_attention"
PER_HEAD_DEFAULT = ("default: every KV-cache class's attention kernel packs a KV head's query heads into one tile "
                    "(FlashAttention-2's decode path, FlashInfer, TensorRT-LLM's XQA)")
FIELDS = ("name", "display_name", "source", "tag", "fitted", *FACTS, PER_HEAD, "forward_overhead_us",
          "layer_overhead_us", "sequence_overhead_us", "host_overlap", "sharpness", "attention_efficiency", "half_rows", "kernels",
          "device_scales")
US = 1e-6


def _number(path: Path, field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(path, field, value, "must be a finite number")
    return float(value)


def _table(path: Path, data: dict, field: str) -> dict:
    value = data.get(field, _MISSING)
    if not isinstance(value, dict) or not value:
        raise DataError(path, field, value, "must be a non-empty table")
    return value


def parse_engine(path: Path, data: dict) -> EngineProfile:
    """One engine profile file as an EngineProfile; a bad field is one line naming it."""
    for key in data:
        if key not in FIELDS:
            raise DataError(path, key, data[key], f"unknown field; allowed: {', '.join(FIELDS)}")
    for key in ("name", "source"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise DataError(path, key, data.get(key, _MISSING), "must be a non-empty string")
    if data["name"] != path.stem:
        raise DataError(path, "name", data["name"], f"must be the file's stem, '{path.stem}'")
    facts = {}
    for fact in FACTS:
        table = data.get(fact, {"value": False, "source": "default"})
        if not isinstance(table, dict) or not isinstance(table.get("value"), bool) \
                or not isinstance(table.get("source"), str) or not table["source"].strip():
            raise DataError(path, fact, table, "must be { value = true|false, source = \"...\" }")
        facts[fact] = table["value"]
    per_head = data.get(PER_HEAD, {"kv_classes": [], "source": "default"})
    if not isinstance(per_head, dict) or set(per_head) != {"kv_classes", "source"} \
            or not isinstance(per_head["kv_classes"], list) or not all(isinstance(c, str) for c in per_head["kv_classes"]) \
            or not isinstance(per_head["source"], str) or not per_head["source"].strip():
        raise DataError(path, PER_HEAD, per_head, f"must be {{ kv_classes = [classes of {', '.join(CLASSES)}], source = \"...\" }}")
    kernels = []
    for cls, table in _table(path, data, "kernels").items():
        if cls not in CLASSES or not isinstance(table, dict) or set(table) != {"bandwidth_efficiency", "compute_efficiency"}:
            raise DataError(path, f"kernels.{cls}", table, f"a class of {', '.join(CLASSES)} with "
                            "bandwidth_efficiency and compute_efficiency")
        values = {k: _number(path, f"kernels.{cls}.{k}", v) for k, v in table.items()}
        try:
            kernels.append(KernelEfficiency(cls, **values))
        except SpecError as err:
            raise DataError(path, f"kernels.{cls}.{err.field}", err.value, err.allowed) from None
    scales = []
    for name, table in data.get("device_scales", {}).items():
        if not isinstance(table, dict) or set(table) != {"compute", "bandwidth"}:
            raise DataError(path, f"device_scales.{name}", table, "a table of compute and bandwidth factors")
        scales.append((name, _number(path, f"device_scales.{name}.compute", table["compute"]),
                       _number(path, f"device_scales.{name}.bandwidth", table["bandwidth"])))
    try:
        return EngineProfile(
            data["name"], tuple(kernels),
            _number(path, "forward_overhead_us", data.get("forward_overhead_us", _MISSING)) * US,
            _number(path, "layer_overhead_us", data.get("layer_overhead_us", _MISSING)) * US,
            _number(path, "sharpness", data.get("sharpness", _MISSING)),
            attention_efficiency=_number(path, "attention_efficiency", data.get("attention_efficiency", 1.0)),
            half_rows=_number(path, "half_rows", data.get("half_rows", 0.0)),
            sequence_overhead_s=_number(path, "sequence_overhead_us", data.get("sequence_overhead_us", 0.0)) * US,
            host_overlap=_number(path, "host_overlap", data.get("host_overlap", 1.0)),
            per_head_attention=tuple(per_head["kv_classes"]), device_scales=tuple(scales), source=data["source"], **facts)
    except SpecError as err:
        raise DataError(path, err.field, err.value, err.allowed) from None


def engine_document(profile: EngineProfile, display_name: str, fitted: dict, accumulate_source: str,
                    mma_sync_source: str = "default: the engine's GEMMs reach each GPU's full tensor rate",
                    per_head_source: str = PER_HEAD_DEFAULT) -> dict:
    """The TOML document of a profile (rounded to 4 significant digits; reads back as written)."""
    def r(x: float) -> float:
        return float(f"{x:.4g}")

    return {"name": profile.name, "display_name": display_name, "source": profile.source, "tag": "derived",
            "fitted": fitted,
            "fp16_accumulate": {"value": profile.fp16_accumulate, "source": accumulate_source},
            "mma_sync_only": {"value": profile.mma_sync_only, "source": mma_sync_source},
            PER_HEAD: {"kv_classes": list(profile.per_head_attention), "source": per_head_source},
            "forward_overhead_us": r(profile.forward_overhead_s / US), "layer_overhead_us": r(profile.layer_overhead_s / US),
            "sequence_overhead_us": r(profile.sequence_overhead_s / US), "host_overlap": r(profile.host_overlap),
            "sharpness": r(profile.sharpness), "attention_efficiency": r(profile.attention_efficiency),
            "half_rows": r(profile.half_rows),
            "kernels": {k.weight_class: {"bandwidth_efficiency": r(k.bandwidth_efficiency),
                                         "compute_efficiency": r(k.compute_efficiency)} for k in profile.kernels},
            "device_scales": {name: {"compute": r(c), "bandwidth": r(b)} for name, c, b in profile.device_scales}}
