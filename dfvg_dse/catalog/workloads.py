"""Workloads (docs/serving.md, "Workloads"): request lengths as a shipped or user TOML summary
(models/workloads/NAME.toml), or a user's CSV trace of requests. Every problem is one line that
names the file, the field (or line and column) and what is allowed."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from dfvg_dse.catalog._io import NAME_RE, read_bytes, read_provenance, read_toml
from dfvg_dse.catalog.errors import _MISSING, DataError, UnknownNameError
from dfvg_dse.specs import InputError, SpecError
from dfvg_dse.specs.hardware import shorten
from dfvg_dse.specs.serving import LENGTH_KINDS, MAX_TOKENS, LengthDistribution, Workload

_FIELDS = ("name", "title", "source", "tag", "notes", "prompt", "output", "trace")
_LENGTH_FIELDS = {"fixed": ("kind", "mean"), "lognormal": ("kind", "mean", "median", "minimum", "maximum"),
                  "quantiles": ("kind", "mean", "probabilities", "tokens")}
CSV_COLUMNS = ("prompt_tokens", "output_tokens")  # a CSV trace's columns, a TOML [trace]'s lists
MAX_CSV_REQUESTS = 2_000_000


def _number(path: Path, field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(path, field, value, "must be a finite number")
    return float(value)


def _length(path: Path, field: str, raw) -> LengthDistribution:
    if not isinstance(raw, dict):
        raise DataError(path, field, raw, "must be a table with kind = " + " | ".join(LENGTH_KINDS[:-1]))
    kind = raw.get("kind", _MISSING)
    if kind not in _LENGTH_FIELDS:
        raise DataError(path, f"{field}.kind", kind, "allowed: " + ", ".join(_LENGTH_FIELDS))
    for key in raw:
        if key not in _LENGTH_FIELDS[kind]:
            raise DataError(path, f"{field}.{key}", raw[key], f"unknown for kind {kind}; allowed: "
                            + ", ".join(_LENGTH_FIELDS[kind]))
    if "mean" not in raw:
        raise DataError(path, f"{field}.mean", _MISSING, "required")
    values = {"mean": _number(path, f"{field}.mean", raw["mean"])}
    if kind == "lognormal":
        if "median" not in raw:
            raise DataError(path, f"{field}.median", _MISSING, "required for kind lognormal")
        values["median"] = _number(path, f"{field}.median", raw["median"])
        for key, default in (("minimum", 1), ("maximum", MAX_TOKENS)):
            value = raw.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int):
                raise DataError(path, f"{field}.{key}", value, "must be an integer number of tokens")
            values[key] = value
    if kind == "quantiles":
        for key in ("probabilities", "tokens"):
            if not isinstance(raw.get(key), list):
                raise DataError(path, f"{field}.{key}", raw.get(key, _MISSING), "required: a list of numbers")
        probabilities = [_number(path, f"{field}.probabilities[{i}]", p) for i, p in enumerate(raw["probabilities"])]
        tokens = raw["tokens"]
        for i, t in enumerate(tokens):
            if isinstance(t, bool) or not isinstance(t, int):
                raise DataError(path, f"{field}.tokens[{i}]", t, "must be an integer number of tokens")
        values.update(probabilities=tuple(probabilities), values=tuple(tokens))
    try:
        return LengthDistribution(kind, **values)
    except SpecError as err:
        raise DataError(path, f"{field}.{'tokens' if err.field == 'values' else err.field}", err.value,
                        err.allowed) from None


def _trace(path: Path, raw) -> tuple[LengthDistribution, LengthDistribution]:
    """A [trace] table: one request per position of its equal-length prompt_tokens and output_tokens
    lists (the pairs a published run served, drawn together as a CSV trace's are)."""
    if not isinstance(raw, dict):
        raise DataError(path, "trace", raw, "must be a table with prompt_tokens and output_tokens lists")
    for key in raw:
        if key not in CSV_COLUMNS:
            raise DataError(path, f"trace.{key}", raw[key], f"unknown field; allowed: {', '.join(CSV_COLUMNS)}")
    lists = []
    for key in CSV_COLUMNS:
        values = raw.get(key, _MISSING)
        if not isinstance(values, list) or not values or len(values) > MAX_CSV_REQUESTS:
            raise DataError(path, f"trace.{key}", values, f"required: a list of 1..{MAX_CSV_REQUESTS:,} token counts")
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS:
                raise DataError(path, f"trace.{key}[{i}]", v, f"must be a whole number of tokens, 1..{MAX_TOKENS:,}")
        lists.append(tuple(values))
    if len(lists[0]) != len(lists[1]):
        raise DataError(path, "trace.output_tokens", f"{len(lists[1])} values",
                        f"must pair with prompt_tokens' {len(lists[0])}, one per request")
    return tuple(LengthDistribution("empirical", sum(v) / len(v), values=v) for v in lists)


def read_workload_toml(path: Path) -> Workload:
    """A TOML workload: name, source, tag and either the prompt and output length tables or a
    [trace] of paired request lengths."""
    data = read_toml(path)
    source, _ = read_provenance(path, data, _FIELDS, "workload")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise DataError(path, "name", name, "must be a non-empty string")
    if "trace" in data:
        for field in ("prompt", "output"):
            if field in data:
                raise DataError(path, field, data[field], "give the [trace] or the [prompt] and [output] tables, not both")
        prompt, output = _trace(path, data["trace"])
        return Workload(name, prompt, output, source, paired=True)
    for field in ("prompt", "output"):
        if field not in data:
            raise DataError(path, field, _MISSING, "required: a table of the lengths (or a [trace] of requests)")
    return Workload(name, _length(path, "prompt", data["prompt"]), _length(path, "output", data["output"]), source)


def _csv_int(path: Path, line: int, column: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise DataError(f"{path}:{line}", column, text, f"must be a whole number of tokens, 1..{MAX_TOKENS:,}") from None
    if not 1 <= value <= MAX_TOKENS:
        raise DataError(f"{path}:{line}", column, value, f"must be 1..{MAX_TOKENS:,} tokens")
    return value


def read_workload_csv(path: Path) -> Workload:
    """A CSV trace: a header with prompt_tokens and output_tokens (and optionally arrival_s, seconds
    from the start, ascending); one request per line. Lengths are drawn together, request by request;
    with arrival_s the requests arrive when the trace says."""
    try:
        text = read_bytes(path).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(path, "(file)", "undecodable bytes", "must be UTF-8 text") from None
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    for column in CSV_COLUMNS:
        if column not in header:
            raise DataError(path, column, _MISSING, f"required column; the header is {', '.join(header) or 'empty'}")
    at = {c: header.index(c) for c in (*CSV_COLUMNS, "arrival_s") if c in header}
    prompts, outputs, arrivals = [], [], []
    for line, row in enumerate(reader, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise DataError(f"{path}:{line}", "(row)", f"{len(row)} cells", f"must have {len(header)}, as the header")
        prompts.append(_csv_int(path, line, "prompt_tokens", row[at["prompt_tokens"]]))
        outputs.append(_csv_int(path, line, "output_tokens", row[at["output_tokens"]]))
        if "arrival_s" in at:
            try:
                t = float(row[at["arrival_s"]])
            except ValueError:
                t = math.nan
            if not (math.isfinite(t) and t >= 0 and (not arrivals or t >= arrivals[-1])):
                raise DataError(f"{path}:{line}", "arrival_s", row[at["arrival_s"]],
                                "must be seconds >= 0, not before the previous request's")
            arrivals.append(t)
        if len(prompts) > MAX_CSV_REQUESTS:
            raise DataError(path, "(rows)", f"over {MAX_CSV_REQUESTS:,}", f"at most {MAX_CSV_REQUESTS:,} requests")
    if not prompts:
        raise DataError(path, "(rows)", 0, "needs at least one request")
    mean_p, mean_o = sum(prompts) / len(prompts), sum(outputs) / len(outputs)
    return Workload(path.stem, LengthDistribution("empirical", mean_p, values=tuple(prompts)),
                    LengthDistribution("empirical", mean_o, values=tuple(outputs)), source=str(path),
                    arrivals_s=tuple(arrivals), paired=True)


def workload_names(dirs) -> list[str]:
    """Names of the workloads in the model directories' workloads/ folders."""
    return sorted({p.stem for d in dirs for p in (Path(d) / "workloads").glob("*.toml") if NAME_RE.match(p.stem)})


def read_workload(spec: str, file: Path | None, dirs) -> Workload:
    """The workload a --workload value names: `file` when it names one (a .csv is a trace, else TOML),
    else the first models/workloads/NAME.toml along the model directories `dirs`."""
    if file is None and spec.lower().endswith(".csv"):
        raise InputError(f"workload: no such file: {shorten(spec)}")
    named = [Path(d) / "workloads" / f"{spec}.toml" for d in dirs] if NAME_RE.match(spec) else []
    path = file or next((p for p in named if p.is_file()), None)
    if path is None:
        raise UnknownNameError("workload", shorten(spec), workload_names(dirs),
                               "a name of models/workloads/, or a .toml or .csv file")
    return read_workload_csv(path) if path.suffix.lower() == ".csv" else read_workload_toml(path)
