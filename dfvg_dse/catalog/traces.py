"""Decoding traces (docs/trace-format.md): one verification round per JSON line, checked field by
field here, so every problem is one line that starts with `TRACE:LINE:` and names the field.

A round's tree is checked as `specs.TreeSpec` checks any tree (root first with -1, parents before
children, ranks >= 0 and distinct among siblings); its accepted path must start at the root and
follow the parents. Keys other than the four read (`round`, stage times, `link_bytes`, ...) are
carried for other uses and not checked.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dfvg_dse.catalog._io import read_jsonl
from dfvg_dse.catalog.errors import _MISSING, CatalogError, DataError
from dfvg_dse.specs import SpecError, TreeSpec


def _integers(where: str, field: str, value: Any) -> list[int]:
    if not isinstance(value, list) or not value:
        raise DataError(where, field, value, "must be a non-empty list of integers")
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, int):
            raise DataError(where, f"{field}[{i}]", x, "must be an integer")
    return value


def check_trace_round(where: str, raw: dict) -> dict:
    """One round (a decoded JSON line) with its four fields checked and typed; `where` is PATH:LINE."""
    for field in ("parents", "ranks", "accepted"):
        if field not in raw:
            raise DataError(where, field, _MISSING, "required (docs/trace-format.md)")
    parents = _integers(where, "parents", raw["parents"])
    ranks = _integers(where, "ranks", raw["ranks"])
    accepted = _integers(where, "accepted", raw["accepted"])
    n = len(parents)
    if len(ranks) != n:
        raise DataError(where, "ranks", f"{len(ranks)} entries", f"must give one rank per node ({n} parents)")
    confidences = raw.get("confidences", [1.0] * n)
    if not isinstance(confidences, list) or len(confidences) != n:
        raise DataError(where, "confidences", confidences, f"must list one probability per node ({n} parents)")
    for i, q in enumerate(confidences):
        if isinstance(q, bool) or not isinstance(q, (int, float)) or (i and not (math.isfinite(q) and 0 <= q <= 1)):
            raise DataError(where, f"confidences[{i}]", q, "must be a probability in [0, 1]")
    try:
        TreeSpec(tuple(parents), tuple(ranks))
    except SpecError as err:  # a parent after its child, a negative or repeated sibling rank
        raise DataError(where, err.field, err.value, err.allowed) from None
    if accepted[0] != 0:
        raise DataError(where, "accepted[0]", accepted[0], "must be 0, the root")
    for i, (parent, node) in enumerate(zip(accepted, accepted[1:]), 1):
        if not 0 < node < n or parents[node] != parent:
            raise DataError(where, f"accepted[{i}]", node, f"must be a child of node {parent} (the path from the "
                            "root follows the parents)")
    return {**raw, "confidences": [float(q) for q in confidences]}


def read_trace_file(path: Path) -> list[tuple[int, dict]]:
    """(line number, checked round) for every round of a trace file; at least one round."""
    rounds = [(line, check_trace_round(f"{path}:{line}", raw)) for line, raw in read_jsonl(path)]
    if not rounds:
        raise CatalogError(f"{path}: no rounds; a trace has one JSON object per line (docs/trace-format.md)")
    return rounds
