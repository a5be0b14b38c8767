"""Property-based fuzzing of the command line (issue 12): every analytic subcommand, with options drawn
from its own click declaration and values that are sensible, empty, huge, negative, NaN, unicode or
300+ characters long. Whatever comes in, the command ends with exit code 0, 1 or 2, prints no
traceback, keeps --json stdout one JSON document, says a usage error in its last line, and finishes
within a generous bound (a hang detector, not a speed test: speed lives in benchmarks/).

A CI run makes EXAMPLES invocations per command in COMMANDS (see the closing note of issue 12).
The stage-process commands (reference generate/bench, calibrate, validate) take minutes per call
and have their own tests (tests/reference, tests/validation); they are not fuzzed here.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from cli_checks import Hang, invoke_bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dfvg_dse.cli import cli, load_all_commands

EXAMPLES = 30  # invocations per command and CI run (derandomized there)
BOUND_S = 120  # a call past this is a hang (the slowest accepted calls here take seconds)
COMMANDS = [("hw", "list"), ("hw", "show"), ("models", "list"), ("models", "show"), ("models", "import"), ("cost",),
            ("tree", "expected"), ("tree", "optimize"), ("tree", "show"), ("tree", "dynamic"),
            ("acceptance", "list"), ("acceptance", "show"), ("acceptance", "verify"), ("acceptance", "fit"),
            ("estimate",), ("compare",), ("sensitivity",), ("search",), ("sweep",), ("pareto",), ("export",),
            ("serve-sim",)]

EXTREME = ["", " ", "-1", "0", "1e309", "nan", "-inf", "9" * 40, "-" * 3, "é中文🙂", "a" * 300, ",", "1,,2",
           "0x10", "1-", "--json", "../../etc/passwd", "\x00", "1" * 300, "0.5," * 100]
NUMBERS = ["1", "2", "3", "8", "0", "-3", "0.5", "1.5", "100", "nan", "inf", "1e300", "99999999999999999999"]
# Sensible values by parameter name, so fuzzing reaches past the first check into the model.
GOOD = {
    "target": ["qwen3-8b", "llama-2-7b", "llama-3.1-70b"], "draft": ["qwen3-0.6b", "llama-68m"],
    "model_name": ["llama-2-7b", "qwen3-0.6b"], "name": ["rtx-4090", "v80", "qwen3-8b", "pcie-gen4-x16-p2p"],
    "device_name": ["rtx-4090", "v80", "h100-sxm", "xeon-silver-4310", "nvlink-4"],
    "verify_device": ["rtx-4090", "a100-80gb", "v80"], "draft_device": ["v80", "u280", "rtx-4090"],
    "gpu": ["rtx-4090", "h100-sxm", "v80"], "fpga": ["v80", "u280"], "cpu": ["xeon-silver-4310"],
    "link_name": ["pcie-gen4-x16-p2p", "nvlink-4"],
    "acceptance_spec": ["pair:qwen3-8b/qwen3-0.6b", "0.8", "0.6,0.2,0.1", "0.1,0.5", "pair:sequoia-demo"],
    "acceptance": ["pair:qwen3-8b/qwen3-0.6b", "0.7"], "profile": ["qwen3-8b/qwen3-0.6b", "0.8"],
    "tree_spec": ["chain:4", "kary:2x2", "seq:3x2", "parents:-1,0,0,1", "choices:[[0],[1],[0,0]]",
                  "vllm:[(0,),(0,0)]", "published:eagle-mc-sim-7b-63", "chain:100000"],
    "tokens": ["1", "1,2,4", "1-64:x2", "1-8"], "context": ["0", "512", "0-4096:1024"], "batch": ["1", "1,4"],
    "vary": ["batch", "acceptance", "link-latency", "target"], "values": ["1,2", "0.5,0.9", "qwen3-8b"],
    "trials": ["3", "5"], "rounds": ["200", "500"], "budget": ["8", "15", "64"], "p": ["0.5,0.3,0.2"],
    "q": ["0.6,0.3,0.1"], "rate_text": ["1", "0.5,2", "2,1"], "rate": ["1", "4"],
    "workload": ["sharegpt-vllm", "azure-conv-2023", "mooncake-conversation"],
}
FAST = {"trials": ["2", "3", "5"], "rounds": ["100", "200", "500"], "repeats": ["1"], "duration": ["2", "5"]}  # work-size options: small


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict:
    """Paths the fuzzer may pass: fresh and nested output names, a file where a folder belongs, a finished
    search run and a sweep run, a trace and a config, and places nobody can write."""
    base = tmp_path_factory.mktemp("fuzz")
    runner = CliRunner()
    runner.invoke(cli, ["search", "--trials", "6", "--results-dir", str(base), "--run-id", "search-run"])
    runner.invoke(cli, ["sweep", "--results-dir", str(base), "--run-id", "sweep-run"])
    (base / "afile").write_text("")
    (base / "trace.jsonl").write_text('{"accepted": 2, "ranks": [0, 0, 1]}\n')
    config = Path(__file__).parent / "catalog" / "config_llama_tiny.json"
    outputs = [str(base / n) for n in ("out.png", "new/deeper/x.svg", "x.bmp", "afile/x.png", "out.json")]
    (base / "cwd").mkdir()
    return {"cwd": base / "cwd", "outputs": outputs + ["/proc/nope/x.png", "/dev/null", str(base)],
            "inputs": [str(base / "search-run"), str(base / "sweep-run"), str(base / "afile"), str(config),
                       str(base / "trace.jsonl"), str(base / "missing.toml"), "/dev/null", str(base)],
            "results": [str(base), str(base / "afile"), "/proc/nope", "/dev/null", str(base / "fresh")]}


def _command(path: tuple[str, ...]) -> click.Command:
    load_all_commands()
    command = cli
    for name in path:
        command = command.commands[name]
    return command


def _values(param: click.Parameter, places: dict) -> st.SearchStrategy[str]:
    """Candidate values for one parameter: good ones for its name and type, then the extremes."""
    name = param.name
    if name in FAST:
        return st.sampled_from(FAST[name])
    typed = param.type
    good: list[str] = list(GOOD.get(name, []))
    if isinstance(typed, click.Choice):
        good += list(typed.choices)
    elif isinstance(typed, (click.IntRange, click.FloatRange)) or typed in (click.INT, click.FLOAT):
        good += NUMBERS
    if name in ("results_dir",):
        good += places["results"]
    elif name in ("output", "plot", "out", "out_dir", "trace_path", "save") or "path" in name and "prompt" not in name:
        good += places["outputs"]
    if isinstance(typed, click.Path) or name in ("run", "config", "study", "trace", "compare_run"):
        good += places["inputs"]
    strategy = st.sampled_from(good) if good else st.nothing()
    return st.one_of(strategy, strategy, st.sampled_from(EXTREME), st.text(max_size=12))


@st.composite
def _arguments(draw, command: click.Command, places: dict) -> tuple[list[str], bool]:
    """(arguments, whether --json was given as the flag, not as some option's value)."""
    args: list[str] = []
    as_json = False
    for param in command.params:
        if isinstance(param, click.Argument):
            args.append(draw(_values(param, places)))
            continue
        if param.name in ("help",) or not isinstance(param, click.Option):
            continue
        wanted = param.required and draw(st.integers(0, 9)) > 0 or draw(st.integers(0, 3)) == 0
        if not wanted:
            continue
        flag = param.opts[0]
        if param.is_flag:
            args.append(flag)
            as_json = as_json or param.name == "as_json"
        elif param.multiple:
            args += [x for value in draw(st.lists(_values(param, places), min_size=1, max_size=2)) for x in (flag, value)]
        else:
            args += [flag, draw(_values(param, places))]
    return args, as_json




def _invoke(args: list[str]):
    return invoke_bounded(args, BOUND_S)


@pytest.mark.slow
@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_any_arguments_end_cleanly(path, places, monkeypatch):
    monkeypatch.chdir(places["cwd"])  # relative paths the fuzzer invents land in a temp folder
    command = _command(path)

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.filter_too_much, HealthCheck.data_too_large])
    @given(_arguments(command, places))
    def check(drawn):
        args, as_json = drawn
        argv = [*path, *args]
        result = _invoke(argv)
        where = f"dfvg-dse {' '.join(repr(a) for a in argv)}"
        assert not isinstance(result.exception, Hang), f"{where}: {result.exception}"
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{where}: {type(result.exception).__name__}: {result.exception}") from result.exception
        assert result.exit_code in (0, 1, 2), f"{where}: exit {result.exit_code}"
        assert "Traceback" not in result.output, f"{where}:\n{result.output[-2000:]}"
        if result.exit_code == 2:
            last = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
            assert last.startswith("Error: "), f"{where}: {result.stderr[-500:]!r}"
            assert len(last) < 400, f"{where}: {len(last)}-character error line"
        if result.exit_code == 0 and as_json and result.stdout.strip():
            json.loads(result.stdout)

    check()
