"""File reading and the {value, unit, tag, source} quantity shared by every data file."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from dfvg_dse import units
from dfvg_dse.catalog.errors import _MISSING, CatalogError, DataError
from dfvg_dse.specs import DeviceSpec, LinkSpec, ModelSpec
from dfvg_dse.specs.hardware import MAX_SHOWN, shorten


class Quantity(NamedTuple):
    """A number as a data file states it, with provenance, and its SI value."""

    value: float
    unit: str
    tag: str
    source: str
    si: float


NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")  # entry names: lower case, digits, ".", "-", "_"

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


# Limits of the one reader path (docs/data-format.md, "Reading limits"). A data file (TOML, JSON)
# holds one entry: the largest shipped one is 6 KB and a Hugging Face config.json a few KB, so
# 16 MiB is far past any real one yet parsed in well under a second. A JSON Lines trace holds one
# round per line (~250 bytes; docs/trace-format.md): 256 MiB is about a million rounds, and it is
# read a line at a time, so no second copy of the whole text is made.
MAX_DATA_BYTES = 16 * 2**20
MAX_LINES_BYTES = 256 * 2**20
# Tables and arrays within each other: the deepest shipped document nests 4 levels (a trace's
# top_probs rows in a line, a config's rope table). Python's parsers and deepcopy recurse once or
# more per level, so a bound far below the interpreter's recursion limit keeps every later step safe.
MAX_DEPTH = 64
_NOT_REGULAR = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def _regular(path: Path, info: os.stat_result) -> None:
    """Refuse what is not a regular file: reading /dev/zero or a FIFO never ends (or never starts)."""
    if not stat.S_ISREG(info.st_mode):
        what = next((name for test, name in _NOT_REGULAR if test(info.st_mode)), "a special file")
        raise CatalogError(f"{path}: not a regular file ({what}); data files are read only from regular files")


def check_regular_file(path: Path) -> None:
    """One line when `path` exists but is no regular file (a device, FIFO, socket or folder)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # missing, or a name the OS cannot hold: the caller says "no such file"
        return
    _regular(path, info)


def _too_big(path: Path, limit: int) -> CatalogError:
    what = "a JSON Lines file" if limit == MAX_LINES_BYTES else "a TOML or JSON data file"
    return CatalogError(f"{path}: larger than {limit // 2**20} MiB, the limit for {what} "
                        "(docs/data-format.md, 'Reading limits')")


def _open_regular(path: Path, limit: int):
    """An open binary handle on `path` after checking it is a regular file of at most `limit` bytes.

    O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before we can look at it.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        handle = os.fdopen(os.open(path, flags), "rb")
    except (OSError, ValueError) as err:
        raise CatalogError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    try:
        info = os.fstat(handle.fileno())
        _regular(path, info)
        if info.st_size > limit:
            raise _too_big(path, limit)
    except BaseException:
        handle.close()
        raise
    return handle


def read_bytes(path: Path, limit: int = MAX_DATA_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, read with a bounded read."""
    with _open_regular(path, limit) as handle:
        try:
            data = handle.read(limit + 1)  # one byte more tells a file that grew past the limit
        except OSError as err:
            raise CatalogError(f"{path}: cannot read: {err.strerror or err}") from None
    if len(data) > limit:
        raise _too_big(path, limit)
    return data


def _field_name(parent: str, key: object) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    text = str(key).encode("utf-8", "backslashreplace").decode("utf-8")  # a key may hold a surrogate too
    return f"{parent}.{text}" if parent else text


def _has_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# A JSON text can hold a surrogate only through a \uD800-\uDFFF escape (UTF-8 cannot encode one).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _json_may_be_hostile(raw: bytes) -> bool:
    """False when a JSON text cannot nest past MAX_DEPTH (fewer brackets than that) nor hold a lone
    surrogate, so the walk below can be skipped: it would double the time to read a large trace."""
    return raw.count(b"[") + raw.count(b"{") >= MAX_DEPTH or _SURROGATE_ESCAPE.search(raw) is not None


def check_document(where: str | Path, data: Any) -> None:
    """Refuse nesting past MAX_DEPTH and strings holding lone surrogates (JSON's "\\ud800" parses to
    one, which no UTF-8 file can hold: writing it later fails). Iterative, so any depth is safe."""
    stack = [(data, "", 0)]
    while stack:
        value, field, depth = stack.pop()
        if isinstance(value, str):
            if _has_surrogate(value):
                raise DataError(where, shorten(field, 4 * MAX_SHOWN), value, "holds a lone surrogate (an unpaired "
                                "\\ud800-\\udfff escape), which is not valid Unicode text; write the character itself")
            continue
        if depth >= MAX_DEPTH:
            raise CatalogError(f"{where}: field '{shorten(field)}' nests tables or arrays deeper than {MAX_DEPTH} levels")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and _has_surrogate(key):
                raise DataError(where, shorten(_field_name(field, key), 4 * MAX_SHOWN), key,
                                "a key holding a lone surrogate is not valid Unicode text")
            if isinstance(item, (dict, list, str)):
                stack.append((item, _field_name(field, key), depth + 1))


def _too_deep(where: str | Path) -> CatalogError:
    return CatalogError(f"{where}: nests tables or arrays deeper than {MAX_DEPTH} levels")


@lru_cache(maxsize=512)
def _read_toml_cached(path: str, mtime_ns: int, size: int) -> dict:
    data = _parse(Path(path), lambda: tomllib.loads(read_bytes(Path(path)).decode("utf-8")),
                  tomllib.TOMLDecodeError, "TOML")
    check_document(path, data)
    return data


def _parse(path: Path, parse, syntax_error: type, what: str):
    """Run `parse`; every way reading `path` can fail becomes one CatalogError line."""
    try:
        return parse()
    except syntax_error as err:
        raise CatalogError(f"{path}: not valid {what}: {err}") from None
    except UnicodeDecodeError:
        raise CatalogError(f"{path}: not valid UTF-8 text") from None
    except RecursionError:  # the parsers recurse once per level: a deep file ends here, not in a traceback
        raise _too_deep(path) from None
    except OSError as err:
        raise CatalogError(f"{path}: cannot read: {err.strerror or err}") from None


def read_toml(path: Path) -> dict:
    """Parse one TOML file (a copy: a caller that edits it cannot change what the next reader sees)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError) as err:
        raise CatalogError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    _regular(path, info)
    if info.st_size > MAX_DATA_BYTES:
        raise _too_big(path, MAX_DATA_BYTES)
    return copy.deepcopy(_read_toml_cached(str(path), info.st_mtime_ns, info.st_size))


def read_json(path: Path) -> dict:
    """Parse a JSON object (a Hugging Face config.json, a tree file)."""
    raw = read_bytes(path)
    data = _parse(path, lambda: json.loads(raw.decode("utf-8")), json.JSONDecodeError, "JSON")
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected a JSON object, got {type(data).__name__}")
    if _json_may_be_hostile(raw):
        check_document(path, data)
    return data


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line of a JSON Lines file (a decoding trace)."""
    rows = []
    left, number = MAX_LINES_BYTES, 0
    with _open_regular(path, MAX_LINES_BYTES) as handle:
        while raw := handle.readline(left + 1):  # bounded even if the file grows while it is read
            number, left = number + 1, left - len(raw)
            if left < 0:
                raise _too_big(path, MAX_LINES_BYTES)
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise CatalogError(f"{where}: not valid UTF-8 text") from None
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                raise CatalogError(f"{where}: not valid JSON: {err.msg}") from None
            except RecursionError:
                raise _too_deep(where) from None
            if not isinstance(value, dict):
                raise CatalogError(f"{where}: expected a JSON object per line")
            if _json_may_be_hostile(raw):
                check_document(where, value)
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
    tag, source = check_provenance(path, field, raw)
    return Quantity(value, unit, tag, source, units.to_si(value, unit, dimension))


def check_provenance(path: Path, field: str, raw: dict) -> tuple[str, str]:
    """The `tag` and `source` of a table of numbers (a quantity, a list of ratios), checked."""
    tag = raw.get("tag", _MISSING)
    if not isinstance(tag, str) or tag not in units.TAGS:
        raise DataError(path, f"{field}.tag", tag, f"allowed: {', '.join(units.TAGS)}")
    source = raw.get("source", _MISSING)
    if not isinstance(source, str) or not source.strip():
        raise DataError(path, f"{field}.source", source, "every number needs a non-empty source")
    return tag, source


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
