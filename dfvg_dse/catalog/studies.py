"""Study files of `search` and `sweep` (docs/search.md, "Study files"): a [models], a [hardware] and
a [space] table, every key checked here against its type and range, so a mistake is one line naming
the file, the table, the key as the file spells it, the value and what is allowed.

`check_study` returns the document typed (integers as int, numbers as float, lists as lists) and
never adds defaults: what it returns is what the file says, ready to be kept in a run's manifest
and compared on --resume.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from dfvg_dse.catalog.errors import CatalogError
from dfvg_dse.specs.hardware import shorten
from dfvg_dse.specs.hardware import show_value as shown
from dfvg_dse.units import DTYPE_BYTES

TABLES = ("models", "hardware", "space")
MODEL_KEYS = ("target", "draft", "acceptance", "target_dtype", "draft_dtype")
HARDWARE_KEYS = ("verify_devices", "draft_devices", "links")
# [space] lists: key -> type of every choice
SPACE_KEYS = {"families": str, "widths": int, "depths": int, "budgets": int, "thresholds": float,
              "window_ratios": float, "temperatures": float, "schedules": str, "batches": int,
              "fpga_pe_fractions": float, "fpga_clocks_mhz": float}
# Closed ranges (None: unbounded). Tree sizes as tree/shapes.py caps them (4096 draft tokens, 1024
# levels); batch and context as `estimate` takes them; an FPGA fabric clock past 1 GHz is no design.
RANGES = {"widths": (1, 4096), "depths": (1, 1024), "budgets": (1, 4096), "batches": (1, 4096),
          "thresholds": (0.0, 0.999), "window_ratios": (1e-6, None), "temperatures": (0.0, None),
          "fpga_pe_fractions": (1e-6, 1.0), "fpga_clocks_mhz": (1.0, 1000.0), "context": (0, 10**7)}
MAX_CHOICES = 256  # choices per [space] list; the grid is their product


class StudyError(CatalogError):
    """A bad key or value in a study file: `{path}: [table] key = value: allowed`."""

    def __init__(self, path: Path | str, table: str, key: str, value: Any, allowed: str):
        text = repr(value) if isinstance(value, float) and value.is_integer() else shown(value)  # 2.0, not 2
        super().__init__(f"{path}: [{table}] {shorten(key)} = {text}: {allowed}")  # a key can be any length


def _bound(x: int | float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"  # 10,000,000, not 1e+07


def _range_text(low, high) -> str:
    return f"in {_bound(low)}..{_bound(high)}" if high is not None else f">= {_bound(low)}"


def _number(path, table: str, key: str, value: Any, kind: type, bounds) -> int | float:
    """One number of the kind the key takes: bool is never a number, 1.5 is no integer."""
    whole = kind is int
    wanted = ("an integer" if whole else "a number") + (f" {_range_text(*bounds)}" if bounds else "")
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        raise StudyError(path, table, key, value, f"must be {wanted}")
    if not whole and not math.isfinite(value):
        raise StudyError(path, table, key, value, f"must be {wanted}")
    low, high = bounds or (None, None)
    if (low is not None and value < low) or (high is not None and value > high):
        raise StudyError(path, table, key, value, f"must be {wanted}")
    return value if whole else float(value)


def _names(path, table: str, key: str, value: Any, what: str, example: str) -> list[str]:
    """A non-empty list of distinct names (a single string is refused, not read letter by letter)."""
    if isinstance(value, str):
        raise StudyError(path, table, key, value, f"must be a list of {what}, e.g. [\"{value[:40]}\"]")
    if not isinstance(value, list) or not value:
        raise StudyError(path, table, key, value, f"must be a non-empty list of {what}, e.g. [{example}]")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name:
            raise StudyError(path, table, f"{key}[{i}]", name, f"must be the name of one of the {what}")
        if name in value[:i]:
            raise StudyError(path, table, f"{key}[{i}]", name, "is listed twice")
    return list(value)


def _choices(path, key: str, value: Any, allowed: Sequence[str] | None) -> list:
    kind = SPACE_KEYS[key]
    if not isinstance(value, list) or not value or len(value) > MAX_CHOICES:
        raise StudyError(path, "space", key, value, f"must be a non-empty list of at most {MAX_CHOICES} "
                         f"{'names' if kind is str else 'integers' if kind is int else 'numbers'}")
    out = []
    for i, item in enumerate(value):
        if kind is str:
            if not isinstance(item, str) or (allowed is not None and item not in allowed):
                raise StudyError(path, "space", f"{key}[{i}]", item,
                                 f"allowed: {', '.join(allowed)}" if allowed is not None else "must be a name")
        else:
            item = _number(path, "space", f"{key}[{i}]", item, kind, RANGES.get(key))
        if item in out:
            raise StudyError(path, "space", f"{key}[{i}]", item, "is listed twice")
        out.append(item)
    return out


def _table(path, doc: dict, table: str, allowed: Sequence[str]) -> dict:
    value = doc.get(table, {})
    if not isinstance(value, dict):
        raise CatalogError(f"{path}: {table} = {shown(value)}: must be a table, [{table}]")
    for key in value:
        if key not in allowed:
            raise StudyError(path, table, key, value[key], f"unknown key; allowed: {', '.join(allowed)}")
    return value


def check_study(path: Path | str, doc: dict, choices: Mapping[str, Sequence[str]] | None = None) -> dict:
    """The study document `doc` (read from `path`) checked key by key and typed.

    `choices` gives the allowed names of the [space] string lists (`families`, `schedules`: the
    search's vocabulary, which lives above the catalog); without it they are checked as names only.
    Raises CatalogError (one line) on the first problem.
    """
    if not doc:  # an empty file would search the default space without a word
        raise CatalogError(f"{path}: an empty study; give a [models], [hardware] or [space] table "
                           "(docs/search.md), or leave --study out for the default space")
    for key, value in doc.items():
        if key not in TABLES and isinstance(value, dict):
            raise CatalogError(f"{path}: unknown table [{shorten(key)}]; allowed: [models], [hardware], [space]")
        if key not in TABLES:
            raise CatalogError(f"{path}: {shorten(key)} = {shown(value)}: unknown key outside a table; keys go in "
                               "[models], [hardware] or [space] (docs/search.md)")
    choices = choices or {}
    out: dict[str, dict] = {}
    if "models" in doc:
        models = _table(path, doc, "models", MODEL_KEYS)
        for key, value in models.items():
            if not isinstance(value, str) or not value.strip():
                example = '"pair:TARGET/DRAFT" or "0.8"' if key == "acceptance" else '"float16"' \
                    if key.endswith("dtype") else '"qwen3-8b"'
                raise StudyError(path, "models", key, value, f"must be a string, e.g. {example}")
            if key.endswith("_dtype") and value not in DTYPE_BYTES:
                raise StudyError(path, "models", key, value, f"allowed: {', '.join(DTYPE_BYTES)}")
        out["models"] = dict(models)
    if "hardware" in doc:
        hardware = _table(path, doc, "hardware", HARDWARE_KEYS)
        out["hardware"] = {}
        for key in ("verify_devices", "draft_devices"):
            if key in hardware:
                out["hardware"][key] = _names(path, "hardware", key, hardware[key], "devices from 'dfvg-dse hw list'",
                                              '"rtx-4090"' if key == "verify_devices" else '"v80", "rtx-4090"')
        if "links" in hardware:
            links = hardware["links"]
            if not isinstance(links, dict):
                raise StudyError(path, "hardware", "links", links,
                                 "must be a table of draft device = link name, e.g. { v80 = \"pcie-gen5-x8-p2p\" }")
            for device, link in links.items():
                if not isinstance(link, str) or not link:
                    raise StudyError(path, "hardware", f"links.{device}", link,
                                     "must be a link name from 'dfvg-dse hw list'")
            out["hardware"]["links"] = dict(links)
    if "space" in doc:
        space = _table(path, doc, "space", ("context", *SPACE_KEYS))
        out["space"] = {key: _number(path, "space", key, value, int, RANGES["context"]) if key == "context"
                        else _choices(path, key, value, choices.get(key)) for key, value in space.items()}
    return out
