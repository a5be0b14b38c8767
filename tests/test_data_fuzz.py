"""Property-based fuzzing of the data files (issue 13): each kind of file the tool reads — hwdb
entries (gpu, fpga, cpu, link, defaults.toml), model files, acceptance profiles, a study file, tree
files (TOML and JSON), a decoding trace (JSON Lines) and a Hugging Face config.json — is parsed,
given 1-3 random mutations (a key deleted or added, a value replaced by another type, a string
replaced by another known name, a number scaled, a value nested past the depth limit, a list
shortened, lengthened or given a duplicate, two values swapped), written back, and read by the commands that use it. Byte-level mutations
(a truncated file, a NUL byte, invalid UTF-8) are run on every kind too.

The invariants are those of tests/test_cli_fuzz.py: exit code 0, 1 or 2; no traceback; an exit 2
ends with one `Error:` line under 400 characters that names the file; --json stdout is one JSON
document; no call runs past BOUND_S (a hang guard). On top: an accepted file (exit 0) never puts
NaN or an infinity in --json output, and a file the tool wrote (models import, acceptance fit)
reads back.

Mutated files go into a fresh overlay folder per example, searched first (--hwdb-dir,
--models-dir), so every other entry is the shipped one.

A CI run (derandomized) makes CASES = (STRUCTURED + BYTES) * len(TARGETS) = (32 + 4) * 17 = 612
examples, in about 12 s here; an example that imports or fits runs the commands that read what it wrote.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import re
import shutil
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import tomli_w
from cli_checks import Hang, invoke_bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dfvg_dse.catalog._io import MAX_DEPTH
from dfvg_dse.cli import _base

STRUCTURED = 32  # examples per target with 1-3 structured mutations, per CI run (derandomized there)
BYTES = 4  # examples per target with one byte-level mutation
BOUND_S = 60  # a call past this is a hang (the slowest accepted calls here take about a second)
TESTS = Path(__file__).parent
ROOT = TESTS.parent


def _small_study() -> str:
    """SMALL_STUDY of tests/search/conftest.py, read without importing that conftest a second time."""
    tree = ast.parse((TESTS / "search" / "conftest.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SMALL_STUDY")
    return ast.literal_eval(node.value)


# A decoding trace in the format of docs/trace-format.md: a 6-node tree, paths of 0 to 2 tokens.
TRACE = [{"round": i, "parents": [-1, 0, 0, 1, 1, 2], "ranks": [0, 0, 1, 0, 1, 0],
          "confidences": [1.0, 0.8, 0.15, 0.6, 0.3, 0.5], "accepted": path, "link_bytes": 64}
         for i, path in enumerate([[0, 1, 3], [0], [0, 1], [0, 2, 5], [0, 1, 4], [0, 1, 3], [0], [0, 1, 3]])]
# A profile whose teacher-forced trace (docs/data-format.md, [trace]) is the fuzzed file: three
# greedy runs of 20 positions (rank -1 at the unused position 0), top-4 probabilities, decreasing.
TRACED_RUNS = [{"ranks": [-1] + [(3 * t + run) % 5 // 2 for t in range(1, 20)],
                "top_probs": [[0.6, 0.2, 0.1, 0.05] if (t + run) % 2 else [0.9, 0.05, 0.03, 0.01] for t in range(20)]}
               for run in range(3)]
TRACED_PROFILE = """name = "traced"
tag = "measured"
source = "a test"
[rank]
probs = [0.6, 0.1, 0.05]
[trace]
file = "traced.trace.jsonl"
run_tokens = 12
"""
TREE_JSON = {"name": "fuzz-tree", "source": "a test", "parents": [-1, 0, 0, 1, 1, 2], "ranks": [0, 0, 1, 0, 1, 0]}

ESTIMATE = ["estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--verify-device", "rtx-4090",
            "--tree", "kary:2x2", "--json"]


@dataclass(frozen=True)
class Place:
    """Where one example's files are: the mutated file, the overlay hwdb and models folders, outputs."""

    file: Path
    hwdb: Path
    models: Path
    out: Path
    base: Path  # the example's folder: side files are here


@dataclass(frozen=True)
class Target:
    """One kind of data file: its text, its format, where the mutated copy goes, and the commands
    that read it (each a list of steps; a step runs only when the one before it exited 0, and a
    step after the first reads what the first wrote, so it must succeed)."""

    name: str
    text: Callable[[], str]
    form: str  # toml, json or jsonl
    where: str  # hwdb/..., models/... or a bare file name in the example folder
    commands: tuple[Callable[[Place], list[list[str]]], ...]
    side: tuple[tuple[str, str], ...] = ()  # (where, text) of files written as they are, next to it


def _shipped(relative: str) -> Callable[[], str]:
    return lambda: (ROOT / relative).read_text()


def _hw(kind: str, name: str, *extra: Callable[[Place], list[list[str]]]) -> Target:
    return Target(kind, _shipped(f"hwdb/{kind}/{name}.toml"), "toml", f"hwdb/{kind}/{name}.toml",
                  (lambda p: [["hw", "show", name, "--json"]], lambda p: [["hw", "list", "--kind", kind, "--json"]],
                   *extra))


def _model(name: str, draft: str, draft_device: str) -> Target:
    return Target(f"model {name}", _shipped(f"models/{name}.toml"), "toml", f"models/{name}.toml", (
        lambda p: [["models", "show", name, "--json"]],
        lambda p: [["cost", "--model", name, "--device", "rtx-4090", "--tokens", "1,64", "--context", "512", "--json"]],
        lambda p: [["estimate", "--target", name, "--draft", draft, "--draft-device", draft_device,
                    "--verify-device", "rtx-4090", "--acceptance", "0.7", "--tree", "chain:3", "--json"]]))


def _config(family: str) -> Target:
    """A Hugging Face config.json for `models import`; what it writes must then read back."""
    text = _shipped(f"tests/catalog/config_{family}_tiny.json")
    return Target(f"config.json {family}", text, "json", "config.json", (
        lambda p: [["models", "import", str(p.file), "--name", "fuzzed", "--out-dir", str(p.out), "--json"],
                   ["--models-dir", str(p.out), "models", "show", "fuzzed", "--json"],
                   ["--models-dir", str(p.out), "cost", "--model", "fuzzed", "--device", "rtx-4090", "--json"]],))


PAIR = "qwen3-8b/qwen3-0.6b"
TARGETS = [
    _hw("gpu", "rtx-4090", lambda p: [[*ESTIMATE, "--draft-device", "v80"]],
        lambda p: [["cost", "--model", "qwen3-8b", "--device", "rtx-4090", "--tokens", "1,128", "--json"]]),
    _hw("fpga", "v80", lambda p: [[*ESTIMATE, "--draft-device", "v80"]],
        lambda p: [["cost", "--model", "qwen3-0.6b", "--device", "v80", "--tokens", "1,33", "--json"]]),
    _hw("cpu", "xeon-silver-4310", lambda p: [[*ESTIMATE, "--draft-device", "xeon-silver-4310"]],
        lambda p: [["cost", "--model", "qwen3-0.6b", "--device", "xeon-silver-4310", "--json"]]),
    _hw("link", "pcie-gen4-x16-host-staged", lambda p: [["hw", "show", "v80", "--json"]],
        lambda p: [[*ESTIMATE, "--draft-device", "v80", "--link", "pcie-gen4-x16-host-staged"]]),
    Target("defaults", _shipped("hwdb/defaults.toml"), "toml", "hwdb/defaults.toml", (
        lambda p: [["hw", "list", "--json"]], lambda p: [["hw", "show", "v80", "--json"]],
        lambda p: [[*ESTIMATE, "--draft-device", "v80"]],
        lambda p: [["cost", "--model", "qwen3-8b", "--device", "rtx-4090", "--json"]])),
    _model("qwen3-8b", "qwen3-0.6b", "v80"),
    _model("opt-125m", "opt-125m", "rtx-4090"),
    _model("llama-3.1-8b", "llama-3.2-1b", "u280"),
    Target("pair profile", _shipped("models/pairs/qwen3-8b__qwen3-0.6b.toml"), "toml",
           "models/pairs/qwen3-8b__qwen3-0.6b.toml", (
               lambda p: [["acceptance", "show", PAIR, "--json"]], lambda p: [["acceptance", "list", "--json"]],
               lambda p: [["tree", "expected", "--acceptance", str(p.file), "--tree", "kary:2x2", "--json"]],
               lambda p: [["tree", "dynamic", "--acceptance", str(p.file), "--rounds", "200", "--json"]],
               lambda p: [[*ESTIMATE, "--draft-device", "v80", "--acceptance", str(p.file)]])),
    Target("study", _small_study, "toml", "study.toml", (
        lambda p: [["search", "--study", str(p.file), "--trials", "3", "--results-dir", str(p.out), "--run-id", "r",
                    "--json"]],)),
    Target("tree toml", _shipped("models/trees/eagle-mc-sim-7b-63.toml"), "toml",
           "models/trees/eagle-mc-sim-7b-63.toml", (
               lambda p: [["tree", "show", "--tree", "published:eagle-mc-sim-7b-63"]],
               lambda p: [["tree", "expected", "--tree", str(p.file), "--acceptance", "0.8", "--json"]],
               lambda p: [["estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--verify-device",
                           "rtx-4090", "--draft-device", "v80", "--tree", str(p.file), "--json"]])),
    Target("tree json", lambda: json.dumps(TREE_JSON), "json", "tree.json", (
        lambda p: [["tree", "show", "--tree", str(p.file), "--acceptance", "0.6,0.2"]],
        lambda p: [["tree", "expected", "--tree", str(p.file), "--acceptance", f"pair:{PAIR}", "--json"]])),
    Target("trace", lambda: "\n".join(json.dumps(r) for r in TRACE) + "\n", "jsonl", "trace.jsonl", (
        lambda p: [["acceptance", "fit", str(p.file), "-o", str(p.out / "fit.toml"), "--bootstrap", "20", "--json"],
                   ["tree", "expected", "--acceptance", str(p.out / "fit.toml"), "--tree", "kary:2x2", "--json"]],)),
    Target("traced profile", lambda: "".join(json.dumps(r) + "\n" for r in TRACED_RUNS), "jsonl",
           "traced.trace.jsonl", (
               lambda p: [[*ESTIMATE, "--draft-device", "v80", "--acceptance", str(p.base / "traced.toml")]],
               lambda p: [["acceptance", "show", str(p.base / "traced.toml"), "--json"]],
               lambda p: [["tree", "expected", "--acceptance", str(p.base / "traced.toml"), "--tree", "chain:4",
                           "--json"]],
               lambda p: [["tree", "dynamic", "--acceptance", str(p.base / "traced.toml"), "--rounds", "200",
                           "--json"]]),
           side=(("traced.toml", TRACED_PROFILE),)),
    *(_config(family) for family in ("llama", "opt", "qwen2")),
]
CASES = (STRUCTURED + BYTES) * len(TARGETS)


# -- mutations of a parsed document -----------------------------------------------------------------
LONG = "x" * 300
# Values of every type a file can hold, and the odd ones of each (the surrogate only survives in JSON;
# in TOML it becomes invalid UTF-8).
VALUES = ["abc", "", LONG, "é中文🙂", "nan", "inf", "-1", "1e309", "\ud800", " ", 0, -1, 1, 7, 2**63, 10**30,
          -10**30, 0.0, -2.5, 1.5, 1e308, -1e308, 1e-308, math.nan, math.inf, -math.inf, True, False, [], [0],
          [1, "a"], [1.5, 2.5], ["x"], [[]], {}, {"value": 1}, {"a": [1]}]
SCALES = [0, -1, 1e-9, 1e-3, 0.5, 2, 1e3, 1e9, 1e300]
UNKNOWN_KEYS = ["fuzz_extra", "targett", "valuee", "é", "", LONG]
DEPTHS = [MAX_DEPTH + 2, 1000]
# Strings of the right type that name something else: another model, device of another kind, link,
# profile, tier, unit, tag, family, RoPE type, dtype (the checks after the type check see these).
NAMES = ["qwen3-0.6b", "opt-125m", "llama-68m", "v80", "rtx-4090", "xeon-silver-4310", "pcie-gen4-x16-p2p", "nvlink-4",
         "pair:sequoia-demo", "0.8", "hbm", "gddr", "ddr", "DSP48E2", "TB/s", "GHz", "count", "fraction", "measured",
         "llama", "opt", "yarn", "dynamic", "bfloat16", "int4", "fp8", "chain", "overlap"]
OPS = ["delete", "add", "retype", "retype", "rename", "scale", "deep", "duplicate", "shorten", "lengthen", "swap"]


def _children(node) -> list:
    if isinstance(node, dict):
        return list(node.items())
    if isinstance(node, list):
        return list(enumerate(node))
    return []


def _paths(node, prefix: tuple = ()) -> list[tuple]:
    """Every position in the document (a path of keys and indices), the root excluded."""
    out = []
    for key, child in _children(node):
        out.append(prefix + (key,))
        out += _paths(child, prefix + (key,))
    return out


def _get(doc, path: tuple):
    for key in path:
        doc = doc[key]
    return doc


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _lengthened(items: list, n: int) -> list:
    """`n` more items like the last one: numbers counted on from it (distinct), anything else copied."""
    last = items[-1]
    if _number(last) and not math.isfinite(last):
        return items + [last] * n
    return items + [last + i + 1 if _number(last) else copy.deepcopy(last) for i in range(n)]


@st.composite
def mutated(draw, document):
    """(document with 1-3 mutations, what was done); a `deep` mutation leaves a marker string that
    _serialize expands into nested arrays or tables (the writers would recurse past their limit)."""
    doc = copy.deepcopy(document)
    log = []
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        op = draw(st.sampled_from(OPS))
        lists = [p for p in paths if isinstance(_get(doc, p), list) and _get(doc, p)]
        numbers = [p for p in paths if _number(_get(doc, p))]
        strings = [p for p in paths if isinstance(_get(doc, p), str)]
        if (op in ("duplicate", "shorten", "lengthen") and not lists or op == "scale" and not numbers
                or op == "rename" and not strings):
            op = "retype"
        if op == "add":
            tables = [()] * isinstance(doc, dict) + [p for p in paths if isinstance(_get(doc, p), dict)]
            if not tables:
                op = "retype"
            else:
                where = draw(st.sampled_from(tables))
                key, value = draw(st.sampled_from(UNKNOWN_KEYS)), copy.deepcopy(draw(st.sampled_from(VALUES)))
                _get(doc, where)[key] = value
                log.append(f"add {where}+{key!r} = {value!r:.40}")
                continue
        if not paths:
            break
        if op == "rename":
            path, name = draw(st.sampled_from(strings)), draw(st.sampled_from(NAMES))
            _get(doc, path[:-1])[path[-1]] = name
            log.append(f"rename {path} = {name!r}")
        elif op == "scale":
            path = draw(st.sampled_from(numbers))
            factor = draw(st.sampled_from(SCALES))
            old = _get(doc, path)
            try:
                new = old * factor
            except OverflowError:
                new = math.inf
            if isinstance(old, int) and isinstance(new, float) and math.isfinite(new) and new.is_integer():
                new = int(new)  # an integer key stays an integer (4096 x 1e300 is a 304-digit int)
            _get(doc, path[:-1])[path[-1]] = new
            log.append(f"scale {path} x{factor}")
        elif op in ("duplicate", "shorten", "lengthen"):
            path = draw(st.sampled_from(lists))
            items = _get(doc, path)
            if op == "duplicate":
                i = draw(st.integers(0, len(items) - 1))
                new = items[:i] + [copy.deepcopy(items[i])] + items[i:]
            elif op == "shorten":
                new = items[:draw(st.integers(0, len(items) - 1))]
            else:
                new = _lengthened(items, draw(st.sampled_from([1, 3, 300])))
            _get(doc, path[:-1])[path[-1]] = new
            log.append(f"{op} {path} -> {len(new)} items")
        elif op == "swap":
            a = draw(st.sampled_from(paths))
            unrelated = [p for p in paths if p[:len(a)] != a and a[:len(p)] != p]
            if not unrelated:
                continue
            b = draw(st.sampled_from(unrelated))
            va, vb = _get(doc, a), _get(doc, b)
            _get(doc, a[:-1])[a[-1]], _get(doc, b[:-1])[b[-1]] = vb, va
            log.append(f"swap {a} <-> {b}")
        else:
            path = draw(st.sampled_from(paths))
            parent = _get(doc, path[:-1])
            if op == "delete":
                del parent[path[-1]]
                log.append(f"delete {path}")
            elif op == "deep":
                depth, kind = draw(st.sampled_from(DEPTHS)), draw(st.sampled_from(["list", "table"]))
                parent[path[-1]] = f"@@deep-{kind}-{depth}@@"
                log.append(f"nest {path} in {depth} {kind}s")
            else:
                value = draw(st.one_of(st.sampled_from(VALUES), st.text(max_size=6), st.integers(), st.floats()))
                parent[path[-1]] = copy.deepcopy(value)  # never an object shared with VALUES or another place
                log.append(f"retype {path} = {value!r:.40}")
    return doc, log


def _deep(kind: str, depth: int, form: str) -> str:
    if kind == "list":
        return "[" * depth + "1" + "]" * depth
    key = '"a": ' if form != "toml" else "a = "
    return ("{" + key) * depth + "1" + "}" * depth


def _serialize(doc, form: str) -> bytes:
    """The document as the file's format writes it (NaN and huge numbers included); deep markers
    expanded in the text; in TOML a lone surrogate becomes invalid UTF-8."""
    if form == "toml":
        text = tomli_w.dumps(doc)
    elif form == "json":
        text = json.dumps(doc, indent=1)
    else:
        rows = doc if isinstance(doc, list) else [doc]
        text = "".join(json.dumps(row) + "\n" for row in rows)
    for kind in ("list", "table"):
        for depth in DEPTHS:
            text = text.replace(f'"@@deep-{kind}-{depth}@@"', _deep(kind, depth, form))
    return text.encode("utf-8", "surrogatepass")


def _parse(text: str, form: str):
    if form == "toml":
        return tomllib.loads(text)
    if form == "json":
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


INVALID_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82", b"\x80\x80"]


@st.composite
def corrupted(draw, raw: bytes):
    """(bytes with one byte-level mutation, what was done)."""
    op = draw(st.sampled_from(["truncate", "nul", "utf8", "utf8"]))
    at = draw(st.integers(0, len(raw)))
    if op == "truncate":
        return raw[:at], [f"truncate at {at} of {len(raw)}"]
    inserted = b"\x00" if op == "nul" else draw(st.sampled_from(INVALID_UTF8))
    return raw[:at] + inserted + raw[at:], [f"insert {inserted!r} at {at}"]


# -- running and checking ---------------------------------------------------------------------------


def _non_finite(value, where: str = "$") -> list[str]:
    """Paths of NaN and infinite floats in a document about to be printed as JSON."""
    if hasattr(value, "item") and not isinstance(value, (list, dict)):
        value = value.item()
    if isinstance(value, float):
        return [] if math.isfinite(value) else [f"{where} = {value}"]
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _non_finite(v, f"{where}.{k}")]
    if isinstance(value, (list, tuple)):
        return [x for i, v in enumerate(value) for x in _non_finite(v, f"{where}[{i}]")]
    return []


@pytest.fixture
def strict_json(monkeypatch) -> list[str]:
    """Every NaN or infinity a command hands to its JSON output (json_safe would print it as null)."""
    found: list[str] = []
    original = _base.json_safe

    def checked(value):
        found.extend(_non_finite(value))
        return original(value)

    monkeypatch.setattr(_base, "json_safe", checked)
    return found


def _invoke(args: list[str]):
    return invoke_bounded(args, BOUND_S)


def _check(result, argv: list[str], names: tuple[str, ...], non_finite: list[str], log: list[str]) -> None:
    where = f"{'; '.join(log)}\n  dfvg-dse {' '.join(argv)}"
    assert not isinstance(result.exception, Hang), f"{where}: {result.exception}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{where}: {type(result.exception).__name__}: {result.exception}") from result.exception
    assert result.exit_code in (0, 1, 2), f"{where}: exit {result.exit_code}\n{result.output[-1000:]}"
    assert "Traceback" not in result.output, f"{where}:\n{result.output[-2000:]}"
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        errors = [line for line in lines if line.startswith("Error: ")]
        assert len(errors) == 1 and lines[-1] == errors[0], f"{where}: {result.stderr[-800:]!r}"
        assert len(errors[0]) < 400, f"{where}: {len(errors[0])}-character error line"
        assert any(name in errors[0] for name in names), f"{where}: the error names no file: {errors[0]}"
    if result.exit_code == 0 and "--json" in argv:
        json.loads(result.stdout)
        assert not non_finite, f"{where}: accepted, and its JSON holds {non_finite[:3]}"


def _run_example(root: Path, target: Target, raw: bytes, command, log: list[str], non_finite: list[str],
                 must_pass: bool = False) -> None:
    base = Path(tempfile.mkdtemp(prefix="example-", dir=root))  # one fresh folder per example
    try:
        place = Place(base / target.where, base / "hwdb", base / "models", base / "out", base)
        for folder in (place.hwdb, place.models, place.out):
            folder.mkdir()
        place.file.parent.mkdir(parents=True, exist_ok=True)
        place.file.write_bytes(raw)
        for where, text in target.side:
            (base / where).write_text(text)
        for step, args in enumerate(command(place)):
            argv = ["--hwdb-dir", str(place.hwdb), "--models-dir", str(place.models), *args]
            non_finite.clear()
            result = _invoke(argv)
            # a step after the first reads a file the tool wrote: the file to name is that one
            names = (place.file.name, *(Path(w).name for w, _ in target.side)) if step == 0 \
                else ("fit.toml", "fuzzed.toml")
            _check(result, argv, names, non_finite, log)
            if (step or must_pass) and result.exit_code != 0:
                raise AssertionError(f"{'; '.join(log)}: refused (a file the tool wrote must read back):\n"
                                     f"  dfvg-dse {' '.join(argv)}\n{result.output[-600:]}")
            if result.exit_code != 0:
                break
    finally:
        shutil.rmtree(base, ignore_errors=True)


SETTINGS = dict(deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.filter_too_much, HealthCheck.data_too_large])


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_shipped_files_pass_unchanged(target, strict_json, tmp_path, monkeypatch):
    """The unmutated file passes every command of its target (else the fuzzer would test nothing)."""
    monkeypatch.chdir(tmp_path)
    raw = target.text().encode("utf-8")
    for command in target.commands:
        _run_example(tmp_path, target, raw, command, ["unchanged"], strict_json, must_pass=True)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_mutated_files_end_cleanly(target, strict_json, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths land in a temp folder
    document = _parse(target.text(), target.form)

    @settings(max_examples=STRUCTURED, **SETTINGS)
    @given(mutated(document), st.sampled_from(target.commands))
    def check(drawn, command):
        doc, log = drawn
        _run_example(tmp_path, target, _serialize(doc, target.form), command, log, strict_json)

    check()


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_corrupted_bytes_end_cleanly(target, strict_json, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = target.text().encode("utf-8")

    @settings(max_examples=BYTES, **SETTINGS)
    @given(corrupted(raw), st.sampled_from(target.commands))
    def check(drawn, command):
        data, log = drawn
        _run_example(tmp_path, target, data, command, log, strict_json)

    check()


def test_the_fuzzer_reaches_every_kind_of_data_file():
    """Every hwdb kind and defaults.toml, models, pairs, trees (TOML and JSON), studies, traces and
    Hugging Face configs have a target."""
    wheres = [t.where for t in TARGETS]
    for kind in ("hwdb/gpu/", "hwdb/fpga/", "hwdb/cpu/", "hwdb/link/", "hwdb/defaults.toml", "models/pairs/",
                 "models/trees/", "study.toml", "tree.json", "trace.jsonl", "config.json"):
        assert any(w.startswith(kind) for w in wheres), kind
    assert any(re.fullmatch(r"models/[^/]+\.toml", w) for w in wheres)
    assert CASES == 612, "update the count in the module docstring (the closing note quotes it)"


def test_the_checks_see_what_they_look_for(strict_json):
    """The fuzzer's own tools: NaN and infinities are found where json_safe would hide them as null,
    and a deep mutation is written past the reader's depth limit."""
    assert _non_finite({"a": [1.0, math.nan], "b": {"c": -math.inf}, "d": 1}) == ["$.a[1] = nan", "$.b.c = -inf"]
    _base.json_safe({"x": math.inf})
    assert strict_json == ["$.x = inf"]
    for form in ("toml", "json", "jsonl"):
        text = _serialize({"a": f"@@deep-list-{DEPTHS[0]}@@", "b": f"@@deep-table-{DEPTHS[0]}@@"}, form).decode()
        value = _parse(text, form)
        value = value[0] if form == "jsonl" else value
        depth, node = 0, value["a"]
        while isinstance(node, list):
            depth, node = depth + 1, node[0]
        assert depth == DEPTHS[0] > MAX_DEPTH and str(value["b"]).count("{") == DEPTHS[0]
