"""Reader of published-measurement files, hwdb/measurements/*.toml (docs/measurements.md).

Every field is checked by type and range; a mistake is one line naming the file, the row and the
field. Names of devices and models are checked against the catalog by the caller (`known`).
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any, Callable, Mapping

from dfvg_dse.catalog._io import read_toml
from dfvg_dse.catalog.errors import _MISSING, DataError
from dfvg_dse.specs.measurements import (ENGINES, MEASURED_DTYPES, METHOD_DRAFTERS, PHASE_METRICS, PHASES,
                                         ForwardMeasurement, MeasurementSource, ServingResult, SpeculativeResult)

KINDS = ("forward", "speculative", "serving")
SOURCE_FIELDS = ("kind", "id", "title", "url", "engine", "engine_version", "published", "notes")
MAX_BATCH = 4096
MAX_TOKENS = 10 ** 6
MAX_ROWS = 10_000

# row field -> (type, check, allowed text); "req" marks required fields
_TEXT = (str, lambda v: True, "a string")
_NAME = (str, lambda v: bool(v.strip()), "a non-empty name")
_COUNT = (int, lambda v: 0 <= v <= MAX_TOKENS, f"an integer in 0..{MAX_TOKENS:,}")


def _choice(options: tuple[str, ...]):
    return (str, lambda v: v in options, "one of " + ", ".join(options))


def _positive(limit: float):
    return (float, lambda v: 0 < v <= limit, f"a number in (0, {limit:g}]")


FORWARD_FIELDS: dict[str, tuple] = {
    "where": _NAME, "device": _NAME, "model": _NAME, "dtype": _choice(MEASURED_DTYPES),
    "group_size": _COUNT, "quant": _TEXT, "bits_per_weight": (float, lambda v: 0 <= v <= 32, "a number in [0, 32]"),
    "kv_dtype": _choice(("float16", "bfloat16", "fp8", "int8")),
    "tensor_parallel": (int, lambda v: 1 <= v <= 64, "an integer in 1..64"),
    "batch": (int, lambda v: 1 <= v <= MAX_BATCH, f"an integer in 1..{MAX_BATCH}"),
    "phase": _choice(PHASES), "prompt_tokens": _COUNT,
    "generated_tokens": _COUNT, "metric": _choice(("tokens_per_s", "ms_per_token", "ms")),
    "value": _positive(1e9), "notes": _TEXT,
}
FORWARD_OPTIONAL = {"group_size": 0, "quant": "", "bits_per_weight": 0.0, "kv_dtype": "float16",
                    "tensor_parallel": 1, "notes": ""}
SPECULATIVE_FIELDS: dict[str, tuple] = {
    "where": _NAME, "device": _NAME, "target": _NAME, "draft": _TEXT, "method": _NAME,
    "tree_tokens": (int, lambda v: 1 <= v <= 4096, "an integer in 1..4096"),
    "tree_depth": (int, lambda v: 1 <= v <= 1024, "an integer in 1..1024"),
    "dtype": _choice(MEASURED_DTYPES), "batch": (int, lambda v: 1 <= v <= MAX_BATCH, f"an integer in 1..{MAX_BATCH}"),
    "temperature": (float, lambda v: 0 <= v <= 10, "a number in [0, 10]"),
    "mean_accepted_tokens": (float, lambda v: 1 <= v <= 4097, "a number of tokens per round >= 1"),
    "speedup": _positive(1e3), "ms_per_token": (float, lambda v: 0 <= v <= 1e6, "a number of ms >= 0 (0: not given)"),
    "draft_engine": (str, lambda v: v in ("",) + ENGINES, "one of " + ", ".join(ENGINES) + " (empty: the source's)"),
    "branch_tokens": (int, lambda v: 0 <= v <= 4096, "an integer in 0..4096"),
    "notes": _TEXT,
}
SPECULATIVE_OPTIONAL = {"ms_per_token": 0.0, "notes": "", "draft": "", "draft_engine": "", "branch_tokens": 0}
MAX_SERVED_REQUESTS = 1000  # a serving row's requests, each served `batch` times: seconds of simulation
SERVING_FIELDS: dict[str, tuple] = {
    **SPECULATIVE_FIELDS, "workload": _NAME,
    "requests": (int, lambda v: 1 <= v <= MAX_SERVED_REQUESTS, f"an integer in 1..{MAX_SERVED_REQUESTS}"),
}


def _typed(path: Path, field: str, value: Any, spec: tuple) -> Any:
    kind, ok, allowed = spec
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, kind) or (kind is float and not math.isfinite(value)) \
            or not ok(value):
        raise DataError(path, field, value, f"must be {allowed}")
    return value


def _row(path: Path, index: int, raw: Any, fields: Mapping[str, tuple], optional: Mapping[str, Any]) -> dict:
    where = f"row[{index}]"
    if not isinstance(raw, dict):
        raise DataError(path, where, raw, "must be a table ([[row]])")
    for key in raw:
        if key not in fields:
            raise DataError(path, f"{where}.{key}", raw[key], f"unknown field; allowed: {', '.join(fields)}")
    out = {}
    for key, spec in fields.items():
        value = raw.get(key, optional.get(key, _MISSING))
        if value is _MISSING:
            raise DataError(path, f"{where}.{key}", _MISSING, "required (docs/measurements.md)")
        out[key] = _typed(path, f"{where}.{key}", value, spec)
    return out


def _forward(path: Path, index: int, row: dict, source: str, engine: str) -> ForwardMeasurement:
    where = f"row[{index}]"
    if row["metric"] not in PHASE_METRICS[row["phase"]]:
        raise DataError(path, f"{where}.metric", row["metric"],
                        f"a {row['phase']} row gives {' or '.join(PHASE_METRICS[row['phase']])}")
    if row["phase"] in ("prefill", "generate") and row["prompt_tokens"] < 1:
        raise DataError(path, f"{where}.prompt_tokens", row["prompt_tokens"],
                        f"a {row['phase']} row starts with a prefill of one or more tokens")
    if row["phase"] in ("decode", "generate", "forward") and row["generated_tokens"] < 1:
        raise DataError(path, f"{where}.generated_tokens", row["generated_tokens"],
                        "a decode rate is measured over one or more generated tokens")
    if row["dtype"] in ("int4", "int8", "fp4") and row["group_size"] == 1:
        raise DataError(path, f"{where}.group_size", 1, "a scale per value is no quantisation: 0 (per channel) or >= 2")
    fields = {k: v for k, v in row.items() if k != "notes"}
    return ForwardMeasurement(source=source, engine=engine, **fields)


def _speculative(path: Path, index: int, row: dict, source: str, engine: str,
                 make: type = SpeculativeResult) -> SpeculativeResult:
    kind = METHOD_DRAFTERS.get(row["method"])
    if kind is None:
        raise DataError(path, f"row[{index}].method", row["method"], f"allowed: {', '.join(sorted(METHOD_DRAFTERS))}")
    if (kind == "model") != bool(row["draft"]):
        needs = "a draft model: name it" if kind == "model" else "no draft model: leave it empty"
        raise DataError(path, f"row[{index}].draft", row["draft"], f"method {row['method']!r} drafts with {needs}")
    if kind == "lookup" and row["draft_engine"]:
        raise DataError(path, f"row[{index}].draft_engine", row["draft_engine"],
                        f"method {row['method']!r} drafts by lookup, in no engine: leave it empty")
    if row["tree_depth"] > row["tree_tokens"]:
        raise DataError(path, f"row[{index}].tree_depth", row["tree_depth"],
                        f"a tree of {row['tree_tokens']} draft tokens has at most that many levels")
    if row["mean_accepted_tokens"] > row["tree_depth"] + 1:
        raise DataError(path, f"row[{index}].mean_accepted_tokens", row["mean_accepted_tokens"],
                        f"at most tree_depth + 1 = {row['tree_depth'] + 1} tokens are accepted per round")
    fields = {k: v for k, v in row.items() if k != "notes"}
    return make(source=source, engine=engine, **fields)


def _serving(path: Path, index: int, row: dict, source: str, engine: str) -> ServingResult:
    if METHOD_DRAFTERS.get(row["method"]) == "lookup":  # the simulator serves a draft model or heads
        raise DataError(path, f"row[{index}].method", row["method"], "a serving row drafts with a draft model or "
                        "heads; lookup methods (" + ", ".join(sorted(m for m, k in METHOD_DRAFTERS.items()
                                                                      if k == "lookup")) + ") are not served")
    if row["branch_tokens"]:  # the simulator's verify forward holds the tree alone
        raise DataError(path, f"row[{index}].branch_tokens", row["branch_tokens"],
                        "a serving row's verify forward holds its draft tree alone: 0")
    return _speculative(path, index, row, source, engine, ServingResult)


def parse_measurements(path: Path, data: dict, known: Callable[[str, str], str | None] | None = None) -> MeasurementSource:
    """A measurement file as a MeasurementSource. `known(kind, name)` returns None when a device or
    model name is in the catalog, else the error text (the caller's catalog knows them)."""
    for key in data:
        if key not in ("publication", "row"):
            raise DataError(path, key, data[key], "unknown table; allowed: [publication], [[row]]")
    head = data.get("publication", _MISSING)
    if not isinstance(head, dict):
        raise DataError(path, "publication", head, "needs a [publication] table (docs/measurements.md)")
    for key in head:
        if key not in SOURCE_FIELDS:
            raise DataError(path, f"publication.{key}", head[key], f"unknown field; allowed: {', '.join(SOURCE_FIELDS)}")
    text = {key: _typed(path, f"publication.{key}", head.get(key, "" if key == "notes" else _MISSING), _NAME
                        if key != "notes" else _TEXT) for key in SOURCE_FIELDS}
    if text["kind"] not in KINDS:
        raise DataError(path, "publication.kind", text["kind"], f"allowed: {', '.join(KINDS)}")
    if text["engine"] not in ENGINES:
        raise DataError(path, "publication.engine", text["engine"], f"allowed: {', '.join(ENGINES)}")
    if text["id"] != path.stem:
        raise DataError(path, "publication.id", text["id"], f"must be the file's stem, '{path.stem}'")
    rows = data.get("row", _MISSING)
    if not isinstance(rows, list) or not rows or len(rows) > MAX_ROWS:
        raise DataError(path, "row", rows if rows is _MISSING else f"{len(rows)} rows" if isinstance(rows, list) else rows,
                        f"needs 1..{MAX_ROWS:,} [[row]] tables")
    forward = text["kind"] == "forward"
    fields, optional, make = {"forward": (FORWARD_FIELDS, FORWARD_OPTIONAL, _forward),
                              "speculative": (SPECULATIVE_FIELDS, SPECULATIVE_OPTIONAL, _speculative),
                              "serving": (SERVING_FIELDS, SPECULATIVE_OPTIONAL, _serving)}[text["kind"]]
    parsed = []
    for i, raw in enumerate(rows):
        row = _row(path, i, raw, fields, optional)
        names = [("device", "device", row["device"])] + ([("model", "model", row["model"])] if forward else
                                                         [("target", "model", row["target"])]
                                                         + ([("draft", "model", row["draft"])] if row["draft"] else []))
        if "workload" in row:
            names.append(("workload", "workload", row["workload"]))
        for key, kind, name in names:
            problem = known(kind, name) if known else None
            if problem:
                raise DataError(path, f"row[{i}].{key}", name, problem)
        parsed.append(make(path, i, row, text["id"], text["engine"]))
    return MeasurementSource(text["id"], text["kind"], text["title"], text["url"], text["engine"],
                             text["engine_version"], text["published"], tuple(parsed), str(path))


def name_check(names_of: Mapping[str, set]) -> Callable[[str, str], str | None]:
    """parse_measurements' `known`: None when a name is among names_of[kind], else why not (a close match)."""
    def known(what: str, name: str) -> str | None:
        names = names_of[what]
        if name in names:
            return None
        close = difflib.get_close_matches(name, sorted(names), n=1)
        return f"no {what} of this name in the catalog" + (f"; did you mean '{close[0]}'?" if close else "")
    return known


def read_measurements(path: Path, known: Callable[[str, str], str | None] | None = None) -> MeasurementSource:
    """One measurement file from disk (parse_measurements)."""
    return parse_measurements(path, read_toml(path), known)


def measurement_document(source: MeasurementSource, notes: str = "") -> dict:
    """A forward measurement file's document (docs/measurements.md), as parse_measurements reads it."""
    rows = []
    for r in source.rows:
        row = {"where": r.where, "device": r.device, "model": r.model, "dtype": r.dtype, "group_size": r.group_size,
               "quant": r.quant, "kv_dtype": r.kv_dtype, "tensor_parallel": r.tensor_parallel, "batch": r.batch,
               "phase": r.phase, "prompt_tokens": r.prompt_tokens, "generated_tokens": r.generated_tokens,
               "metric": r.metric, "value": float(f"{r.value:.6g}")}
        rows.append(row)
    return {"publication": {"kind": source.kind, "id": source.id, "title": source.title, "url": source.url,
                            "engine": source.engine, "engine_version": source.engine_version,
                            "published": source.published, "notes": notes},
            "row": rows}
