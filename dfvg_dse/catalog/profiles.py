"""Parsers of acceptance profiles (models/pairs/*.toml) and of tree files (models/trees/*.toml, or a
user's JSON/TOML with `parents` (+ `ranks`) or `choices`). Format: docs/data-format.md."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dfvg_dse.catalog._io import read_json, read_jsonl, read_provenance, read_string, read_toml
from dfvg_dse.catalog.errors import _MISSING, CatalogError, DataError
from dfvg_dse.specs import AcceptanceProfile, AcceptanceTrace, ConfidenceModel, SpecError, TreeSpec
from dfvg_dse.specs.hardware import show_value

PROFILE_FIELDS = ("name", "target", "draft", "workload", "temperature", "tag", "source", "notes", "rank",
                  "depth_rank", "confidence", "fit", "trace")
TRACE_FIELDS = ("file", "run_tokens")
TRACE_LINE_FIELDS = ("ranks", "top_probs", "accept_probs", "bonus_probs")
TOP_PROBS_SUM_SLACK = 1e-4  # rows are written rounded to 6 digits (trace_lines); K of them may add a little
CONFIDENCE_FIELDS = ("top1_mean", "concentration", "tail_shares", "calibration_q", "calibration_accept")


def _floats(path: Path, field: str, value: Any, nested: bool = False, empty_ok: bool = False) -> tuple:
    if not isinstance(value, list) or (not value and not empty_ok):
        raise DataError(path, field, value, "must be a non-empty list of numbers")
    if nested:
        return tuple(_floats(path, f"{field}[{i}]", row) for i, row in enumerate(value))
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not _finite(x):
            raise DataError(path, f"{field}[{i}]", x, "must be a finite number")
    return tuple(float(x) for x in value)


def _number(path: Path, field: str, value: Any, positive: bool = False) -> float:
    """A finite number >= 0, or > 0 (booleans are not numbers here, though Python counts them as ints)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value < 0
            or (positive and value == 0)):
        raise DataError(path, field, value, "must be a positive number" if positive else "must be a number >= 0")
    return float(value)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past float range
        return False


def _metadata(path: Path, data: dict) -> None:
    """The descriptive fields: strings, a temperature, a [fit] table (`acceptance list` shows them)."""
    for field in ("target", "draft", "workload", "notes"):
        read_string(path, data, field, None)
    if "temperature" in data:  # the sampling temperature the profile was measured at: 0 = greedy
        _number(path, "temperature", data["temperature"])
    if "fit" in data and not isinstance(data["fit"], dict):
        raise DataError(path, "fit", data["fit"], "must be a table (written by `acceptance fit`)")


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
    _metadata(path, data)
    probs = _floats(path, "rank.probs", rank.get("probs", _MISSING))
    for bound in ("ci_low", "ci_high"):  # the bootstrap interval: one bound per rank, each a probability
        if bound in rank:
            values = _floats(path, f"rank.{bound}", rank[bound])
            if len(values) != len(probs) or not all(0.0 <= x <= 1.0 for x in values):
                raise DataError(path, f"rank.{bound}", rank[bound],
                                f"must list {len(probs)} probabilities in [0, 1], one per entry of rank.probs")
            for i, (x, p) in enumerate(zip(values, probs)):  # an interval holds its estimate
                if (x > p) if bound == "ci_low" else (x < p):
                    raise DataError(path, f"rank.{bound}[{i}]", x, f"must be {'<=' if bound == 'ci_low' else '>='} "
                                    f"rank.probs[{i}] = {p:g}: the interval holds its estimate")
    depth_rank = _table(path, data, "depth_rank", ("matrix",))
    confidence = _table(path, data, "confidence", CONFIDENCE_FIELDS)
    try:
        model = None
        if confidence is not None:
            model = ConfidenceModel(
                top1_mean=_floats(path, "confidence.top1_mean", confidence.get("top1_mean", _MISSING)),
                concentration=_number(path, "confidence.concentration", confidence.get("concentration", _MISSING),
                                      positive=True),
                tail_shares=_floats(path, "confidence.tail_shares", confidence.get("tail_shares", []), empty_ok=True),
                calibration_q=_floats(path, "confidence.calibration_q", confidence.get("calibration_q", []),
                                      empty_ok=True),
                calibration_accept=_floats(path, "confidence.calibration_accept",
                                           confidence.get("calibration_accept", []), empty_ok=True))
        return AcceptanceProfile(
            name=name, rank_probs=probs,
            depth_rank=_floats(path, "depth_rank.matrix", depth_rank.get("matrix", _MISSING), nested=True)
            if depth_rank is not None else None,
            confidence=model, source=source, trace=_trace(path, data, name, source))
    except SpecError as err:
        prefix = "confidence." if err.field in CONFIDENCE_FIELDS + ("calibration",) else ""
        raise DataError(path, prefix + err.field.replace("rank_probs", "rank.probs")
                        .replace("depth_rank", "depth_rank.matrix"), err.value, err.allowed) from None


def _trace(path: Path, data: dict, name: str, source: str) -> AcceptanceTrace | None:
    """The profile's teacher-forced trace: a [trace] table naming a JSON Lines file (relative to the
    profile) with one run per line — `ranks` (+ `top_probs`) greedy, or `accept_probs` and
    `bonus_probs` sampled — and the tokens every run decoded (`run_tokens`)."""
    table = _table(path, data, "trace", TRACE_FIELDS)
    if table is None:
        return None
    file = table.get("file", _MISSING)
    if not isinstance(file, str) or not file:
        raise DataError(path, "trace.file", file, "must name a JSON Lines file of teacher-forced runs")
    run_tokens = table.get("run_tokens", _MISSING)
    if isinstance(run_tokens, bool) or not isinstance(run_tokens, int) or run_tokens < 2:
        raise DataError(path, "trace.run_tokens", run_tokens, "must be the tokens each run decoded, an integer >= 2")
    trace_path = path.parent / file
    if not trace_path.is_file():
        raise DataError(path, "trace.file", file, f"no such file next to the profile ({trace_path})")
    runs: dict[str, list] = {field: [] for field in TRACE_LINE_FIELDS}
    for number, line in read_jsonl(trace_path):
        where = f"{trace_path}:{number}"
        for field in line:
            if field not in TRACE_LINE_FIELDS:
                raise DataError(where, field, line[field], f"unknown key; allowed: {', '.join(TRACE_LINE_FIELDS)}")
        if ("ranks" in line) == ("accept_probs" in line):
            raise DataError(where, "ranks", line.get("ranks", _MISSING),
                            "a run gives either ranks (greedy) or accept_probs and bonus_probs (sampled)")
        if ("accept_probs" in line) != ("bonus_probs" in line):
            missing = "bonus_probs" if "accept_probs" in line else "accept_probs"
            raise DataError(where, missing, _MISSING, "a sampled run gives both accept_probs and bonus_probs")
        for field in TRACE_LINE_FIELDS:
            if field in line:
                runs[field].append(_trace_values(where, field, line[field], run_tokens))
        if "bonus_probs" in line and len(line["bonus_probs"]) != len(line["accept_probs"]):
            raise DataError(where, "bonus_probs", f"{len(line['bonus_probs'])} positions",
                            f"must give one probability per position of accept_probs ({len(line['accept_probs'])})")
        if "top_probs" in line and len(line["top_probs"]) != len(line.get("ranks", [])):
            raise DataError(where, "top_probs", f"{len(line['top_probs'])} positions",
                            f"must give one row per position of ranks ({len(line.get('ranks', []))})")
    if runs["top_probs"] and len(runs["top_probs"]) != len(runs["ranks"]):
        raise DataError(trace_path, "top_probs", f"{len(runs['top_probs'])} of {len(runs['ranks'])} runs",
                        "give top_probs on every run or on none")
    if runs["ranks"] and runs["accept_probs"]:
        raise DataError(trace_path, "runs", "greedy and sampled", "a trace holds runs of one kind")
    try:
        return AcceptanceTrace(name, run_tokens, ranks=tuple(runs["ranks"]), accept_probs=tuple(runs["accept_probs"]),
                               bonus_probs=tuple(runs["bonus_probs"]), source=source,
                               top_probs=tuple(np.asarray(t, dtype=float) for t in runs["top_probs"]))
    except SpecError as err:
        raise DataError(trace_path, "runs", err.value, err.allowed) from None


def _trace_values(where: str, field: str, value, run_tokens: int):
    """One run's list for a trace field, checked: ranks are integers >= -1, probabilities in [0, 1],
    top_probs a list of such lists; at least run_tokens positions."""
    if not isinstance(value, list) or len(value) < run_tokens:
        raise DataError(where, field, value, f"must list at least run_tokens = {run_tokens} positions")
    if field == "ranks":  # -1 only at the unused position 0: elsewhere it would index the last rank
        for t, x in enumerate(value):
            if isinstance(x, bool) or not isinstance(x, int) or x < (-1 if t == 0 else 0):
                raise DataError(where, f"ranks[{t}]", x, "ranks are integers >= 0 (-1 at position 0)")
        return tuple(value)
    if field != "top_probs":
        if any(isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x <= 1.0 for x in value):
            raise DataError(where, field, value, "probabilities must be numbers in [0, 1]")
        return tuple(float(x) for x in value)
    width = len(value[0]) if isinstance(value[0], list) else 0
    for t, row in enumerate(value):
        if not isinstance(row, list) or len(row) != width or width == 0:
            raise DataError(where, field, row,
                            f"every position lists the same number of probabilities ({width or 'one or more'})")
        if any(isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x <= 1.0 for x in row):
            raise DataError(where, field, row, "probabilities must be numbers in [0, 1]")
        if any(a < b for a, b in zip(row, row[1:])):
            raise DataError(where, field, row, "a position's probabilities must be in decreasing order")
        if sum(row) > 1.0 + TOP_PROBS_SUM_SLACK:  # the K largest of one distribution
            raise DataError(where, f"{field}[{t}]", f"sum {sum(row):.6g}",
                            "a position's probabilities are the draft's largest of one distribution: they sum to <= 1")
    return value


def trace_lines(trace: AcceptanceTrace) -> list[dict]:
    """A trace's runs as the JSON Lines objects `_trace` reads (one per run)."""
    if trace.greedy:
        tops = trace.top_probs or [None] * len(trace.ranks)
        return [{"ranks": list(r), **({"top_probs": np.asarray(t).round(6).tolist()} if t is not None else {})}
                for r, t in zip(trace.ranks, tops)]
    return [{"accept_probs": [round(x, 6) for x in a], "bonus_probs": [round(x, 6) for x in b]}
            for a, b in zip(trace.accept_probs, trace.bonus_probs)]


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


def _tree_integers(path: Path, field: str, value: Any, low: int) -> list[int]:
    if not isinstance(value, list) or not value:
        raise DataError(path, field, value, f"must be a non-empty list of integers >= {low}")
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, int) or x < low:
            raise DataError(path, f"{field}[{i}]", x, f"must be an integer >= {low}")
    return value


def read_tree_document(path: Path) -> dict:
    """A tree file: JSON or TOML with `parents` (and optional `ranks`) or `choices` (docs/data-format.md),
    each field checked here so an error names the file; other keys (an exported design's) are kept."""
    data = read_json(path) if path.suffix == ".json" else read_toml(path)
    if not {"parents", "choices"} & set(data):
        raise CatalogError(f"{path}: a tree file needs 'parents' (with optional 'ranks') or 'choices'")
    for field in ("name", "source"):
        read_string(path, data, field, None)
    if "parents" in data:  # with both (an exported design), the parents win, as tree.from_document reads it
        parents = _tree_integers(path, "parents", data["parents"], -1)
        ranks = data.get("ranks")
        if ranks is not None and len(_tree_integers(path, "ranks", ranks, 0)) != len(parents):
            raise DataError(path, "ranks", f"{len(ranks)} entries", f"must give one rank per node ({len(parents)})")
        try:  # without ranks any distinct ones do: only the parents are checked
            TreeSpec(tuple(parents), tuple(ranks) if ranks is not None else tuple(range(len(parents))))
        except SpecError as err:
            raise DataError(path, err.field, err.value, err.allowed) from None
    elif not isinstance(data["choices"], (list, str)):
        raise DataError(path, "choices", data["choices"], "must be a list of paths, e.g. [[0], [1], [0, 0]]")
    elif isinstance(data["choices"], list):
        seen = set()
        for i, choice in enumerate(data["choices"]):
            path_ranks = tuple(_tree_integers(path, f"choices[{i}]", choice, 0))
            if path_ranks in seen:
                raise DataError(path, f"choices[{i}]", choice, "is listed twice")
            seen.add(path_ranks)
        for i, choice in enumerate(data["choices"]):
            if len(choice) > 1 and tuple(choice[:-1]) not in seen:
                raise DataError(path, f"choices[{i}]", choice,
                                f"needs its parent path {show_value(choice[:-1])} listed too")
    return data
