"""Parsers of acceptance profiles (models/pairs/*.toml) and of tree files (models/trees/*.toml, or a
user's JSON/TOML with `parents` (+ `ranks`) or `choices`). Format: docs/data-format.md."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dfvg_dse.catalog._io import read_json, read_provenance, read_string, read_toml
from dfvg_dse.catalog.errors import _MISSING, CatalogError, DataError
from dfvg_dse.specs import AcceptanceProfile, ConfidenceModel, SpecError

PROFILE_FIELDS = ("name", "target", "draft", "workload", "temperature", "tag", "source", "notes", "rank",
                  "depth_rank", "confidence", "fit")
CONFIDENCE_FIELDS = ("top1_mean", "concentration", "tail_shares", "calibration_q", "calibration_accept")


def _floats(path: Path, field: str, value: Any, nested: bool = False, empty_ok: bool = False) -> tuple:
    if not isinstance(value, list) or (not value and not empty_ok):
        raise DataError(path, field, value, "must be a non-empty list of numbers")
    if nested:
        return tuple(_floats(path, f"{field}[{i}]", row) for i, row in enumerate(value))
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise DataError(path, f"{field}[{i}]", x, "must be a finite number")
    return tuple(float(x) for x in value)


def _table(path: Path, data: dict, key: str, allowed: tuple[str, ...]) -> dict | None:
    table = data.get(key)
    if table is None:
        return None
    if not isinstance(table, dict):
        raise DataError(path, key, table, "must be a table")
    for field in table:
        if field not in allowed:
            raise DataError(path, f"{key}.{field}", table[field], f"unknown key; allowed: {', '.join(allowed)}")
    return table


def parse_profile(path: Path, data: dict) -> AcceptanceProfile:
    """Build an AcceptanceProfile from a profile document."""
    source, _ = read_provenance(path, data, PROFILE_FIELDS, "profile")
    name = read_string(path, data, "name")
    rank = _table(path, data, "rank", ("probs", "ci_low", "ci_high"))
    if rank is None:
        raise DataError(path, "rank", _MISSING, "a [rank] table with `probs` (p_1, p_2, ...) is required")
    depth_rank = _table(path, data, "depth_rank", ("matrix",))
    confidence = _table(path, data, "confidence", CONFIDENCE_FIELDS)
    try:
        model = None
        if confidence is not None:
            model = ConfidenceModel(
                top1_mean=_floats(path, "confidence.top1_mean", confidence.get("top1_mean", _MISSING)),
                concentration=float(confidence.get("concentration", 0.0)),
                tail_shares=_floats(path, "confidence.tail_shares", confidence.get("tail_shares", []), empty_ok=True),
                calibration_q=_floats(path, "confidence.calibration_q", confidence.get("calibration_q", []),
                                      empty_ok=True),
                calibration_accept=_floats(path, "confidence.calibration_accept",
                                           confidence.get("calibration_accept", []), empty_ok=True))
        return AcceptanceProfile(
            name=name, rank_probs=_floats(path, "rank.probs", rank.get("probs", _MISSING)),
            depth_rank=_floats(path, "depth_rank.matrix", depth_rank.get("matrix", _MISSING), nested=True)
            if depth_rank is not None else None,
            confidence=model, source=source)
    except SpecError as err:
        prefix = "confidence." if err.field in CONFIDENCE_FIELDS + ("calibration",) else ""
        raise DataError(path, prefix + err.field.replace("rank_probs", "rank.probs")
                        .replace("depth_rank", "depth_rank.matrix"), err.value, err.allowed) from None


def profile_document(profile: AcceptanceProfile, meta: dict) -> dict:
    """The TOML document of a profile (for `acceptance fit`); `meta` adds target, draft, fit, ..."""
    document = {"name": profile.name, **meta, "source": profile.source, "rank": {"probs": list(profile.rank_probs)}}
    if "ci" in document:
        low, high = document.pop("ci")
        document["rank"]["ci_low"], document["rank"]["ci_high"] = list(low), list(high)
    if profile.depth_rank is not None:
        document["depth_rank"] = {"matrix": [list(row) for row in profile.depth_rank]}
    if profile.confidence is not None:
        c = profile.confidence
        document["confidence"] = {"top1_mean": list(c.top1_mean), "concentration": c.concentration,
                                  "tail_shares": list(c.tail_shares), "calibration_q": list(c.calibration_q),
                                  "calibration_accept": list(c.calibration_accept)}
    return document


def read_tree_document(path: Path) -> dict:
    """A tree file: JSON or TOML with `parents` (and optional `ranks`) or `choices`."""
    data = read_json(path) if path.suffix == ".json" else read_toml(path)
    if not {"parents", "choices"} & set(data):
        raise CatalogError(f"{path}: a tree file needs 'parents' (with optional 'ranks') or 'choices'")
    return data
