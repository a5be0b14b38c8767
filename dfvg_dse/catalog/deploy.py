"""Reader of hwdb/engine-support/ENGINE.toml: the checked releases of a serving engine and what
each runs of a speculative design (specs/deploy.py)."""

from __future__ import annotations

from pathlib import Path

from dfvg_dse.catalog.errors import _MISSING, DataError
from dfvg_dse.specs.deploy import EngineSupport
from dfvg_dse.specs.hardware import SpecError

FIELDS = ("engine", "display_name", "cost_profile", "release")
RELEASE_FIELDS = ("version", "trees", "max_batch", "draft_dtype", "checked", "source")
OPTIONAL_RELEASE_FIELDS = ("head_methods",)  # draft-head kind -> the engine's method name (issue 18)


def parse_engine_support(path: Path, data: dict) -> list[EngineSupport]:
    """Every release of one engine's file, newest last; a bad field is one line naming it."""
    for key in data:
        if key not in FIELDS:
            raise DataError(path, key, data[key], f"unknown field; allowed: {', '.join(FIELDS)}")
    for key in ("engine", "display_name", "cost_profile"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise DataError(path, key, data.get(key, _MISSING), "must be a non-empty string")
    if data["engine"] != path.stem:
        raise DataError(path, "engine", data["engine"], f"must be the file's stem, '{path.stem}'")
    releases = data.get("release", _MISSING)
    if not isinstance(releases, list) or not releases or not all(isinstance(r, dict) for r in releases):
        raise DataError(path, "release", releases, "must be one or more [[release]] tables")
    out: list[EngineSupport] = []
    for i, table in enumerate(releases):
        for key in table:
            if key not in RELEASE_FIELDS + OPTIONAL_RELEASE_FIELDS:
                raise DataError(path, f"release[{i}].{key}", table[key],
                                f"unknown field; allowed: {', '.join(RELEASE_FIELDS + OPTIONAL_RELEASE_FIELDS)}")
        methods = table.get("head_methods", {})
        if not isinstance(methods, dict) or not all(isinstance(v, str) and v for v in methods.values()):
            raise DataError(path, f"release[{i}].head_methods", methods,
                            "must be a table of head kind = \"the engine's method name\"")
        missing = [k for k in RELEASE_FIELDS if k not in table]
        if missing:
            raise DataError(path, f"release[{i}].{missing[0]}", _MISSING, "required")
        try:
            out.append(EngineSupport(data["engine"], table["version"], data["display_name"], data["cost_profile"],
                                     table["trees"], table["max_batch"], table["draft_dtype"], table["checked"],
                                     table["source"], tuple(sorted(methods.items()))))
        except SpecError as err:
            raise DataError(path, f"release[{i}].{err.field}", err.value, err.allowed) from None
    versions = [r.version for r in out]
    if len(set(versions)) != len(versions):
        raise DataError(path, "release", versions, "each version once")
    return out
