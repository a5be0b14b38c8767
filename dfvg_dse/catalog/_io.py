"""File reading and the {value, unit, tag, source} quantity shared by every data file."""

from __future__ import annotations

import copy
import json
import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from dfvg_dse import units
from dfvg_dse.catalog.errors import _MISSING, CatalogError, DataError
from dfvg_dse.specs import DeviceSpec, LinkSpec, ModelSpec


class Quantity(NamedTuple):
    """A number as a data file states it, with provenance, and its SI value."""

    value: float
    unit: str
    tag: str
    source: str
    si: float


@dataclass(frozen=True)
class ModelEntry:
    spec: ModelSpec
    path: Path
    tag: str
    published_params: Quantity | None
    config: dict


@dataclass(frozen=True)
class HwEntry:
    spec: DeviceSpec | LinkSpec
    kind: str
    path: Path
    quantities: dict  # field -> Quantity, the provenance of every number


@lru_cache(maxsize=512)
def _read_toml_cached(path: str, mtime_ns: int) -> dict:
    with open(path, "rb") as handle:
        return tomllib.load(handle)


def _parse(path: Path, parse, syntax_error: type, what: str):
    """Run `parse`; every way reading `path` can fail becomes one CatalogError line."""
    try:
        return parse()
    except syntax_error as err:
        raise CatalogError(f"{path}: not valid {what}: {err}") from None
    except UnicodeDecodeError:
        raise CatalogError(f"{path}: not valid UTF-8 text") from None
    except OSError as err:
        raise CatalogError(f"{path}: cannot read: {err.strerror or err}") from None


def read_toml(path: Path) -> dict:
    """Parse one TOML file (a copy: a caller that edits it cannot change what the next reader sees)."""
    return copy.deepcopy(_parse(path, lambda: _read_toml_cached(str(path), path.stat().st_mtime_ns),
                                tomllib.TOMLDecodeError, "TOML"))


def read_json(path: Path) -> dict:
    """Parse a JSON object (a Hugging Face config.json)."""
    data = _parse(path, lambda: json.loads(path.read_bytes().decode("utf-8")), json.JSONDecodeError, "JSON")
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line of a JSON Lines file (a decoding trace)."""
    text = _parse(path, lambda: path.read_bytes().decode("utf-8"), ValueError, "text")
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise CatalogError(f"{path}:{number}: not valid JSON: {err.msg}") from None
        if not isinstance(value, dict):
            raise CatalogError(f"{path}:{number}: expected a JSON object per line")
        rows.append((number, value))
    return rows


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer past float range
        return False


def parse_quantity(path: Path, field: str, raw: Any, dimension: str, positive: bool = True) -> Quantity:
    """Check one {value, unit, tag, source} table and convert its value to SI."""
    if not isinstance(raw, dict):
        raise DataError(path, field, raw, "must be a table {value, unit, tag, source}")
    extra = sorted(set(raw) - {"value", "unit", "tag", "source"})
    if extra:
        raise DataError(path, f"{field}.{extra[0]}", raw[extra[0]], "allowed keys: value, unit, tag, source")
    value = raw.get("value", _MISSING)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
        raise DataError(path, f"{field}.value", value, "must be a finite number")
    if value < 0 or (positive and value == 0):
        raise DataError(path, f"{field}.value", value, "must be > 0" if positive else "must be >= 0")
    if dimension == units.COUNT and value != int(value):
        raise DataError(path, f"{field}.value", value, "must be a whole number")
    if dimension == units.FRACTION and value > 1:
        raise DataError(path, f"{field}.value", value, "must be a fraction in (0, 1]")
    unit = raw.get("unit", _MISSING)
    if not isinstance(unit, str) or unit not in units.UNITS or units.UNITS[unit][0] != dimension:
        raise DataError(path, f"{field}.unit", unit, f"allowed: {', '.join(units.units_of(dimension))}")
    tag = raw.get("tag", _MISSING)
    if not isinstance(tag, str) or tag not in units.TAGS:
        raise DataError(path, f"{field}.tag", tag, f"allowed: {', '.join(units.TAGS)}")
    source = raw.get("source", _MISSING)
    if not isinstance(source, str) or not source.strip():
        raise DataError(path, f"{field}.source", source, "every number needs a non-empty source")
    return Quantity(value, unit, tag, source, units.to_si(value, unit, dimension))


def read_string(path: Path, data: dict, field: str, default: Any = _MISSING) -> Any:
    value = data.get(field, default)
    if value is _MISSING:
        raise DataError(path, field, _MISSING, "required")
    if value is not None and not isinstance(value, str):
        raise DataError(path, field, value, "must be a string")
    return value


def read_provenance(path: Path, data: dict, allowed: tuple[str, ...], what: str) -> tuple[str, str]:
    """Check a document's field names, its `source` and its `tag`; returns (source, tag)."""
    for field in data:
        if field not in allowed:
            raise DataError(path, field, data[field], f"unknown field; allowed: {', '.join(allowed)}")
    source = read_string(path, data, "source")
    if not source.strip():
        raise DataError(path, "source", source, f"every {what} needs a non-empty source")
    tag = data.get("tag", _MISSING)
    if not isinstance(tag, str) or tag not in units.TAGS:
        raise DataError(path, "tag", tag, f"allowed: {', '.join(units.TAGS)}")
    return source, tag
