"""Acceptance profiles with a teacher-forced trace on disk: `calibrate` writes them, any command
reads them through --acceptance FILE, estimates replay them, and a bad trace is one line."""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from cli_checks import one_line_error
from dfvg_dse.acceptance import check_round, replay
from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.lookup import write_toml_atomic
from dfvg_dse.catalog.profiles import profile_document, trace_lines
from dfvg_dse.cli import cli
from dfvg_dse.export import write_jsonl
from dfvg_dse.specs import AcceptanceProfile, AcceptanceTrace, InputError
from dfvg_dse.tree import parse_tree_spec


def _write(folder, trace: AcceptanceTrace, lines=None):
    profile = AcceptanceProfile("traced", (0.6, 0.1), source="a test", trace=trace)
    document = profile_document(profile, {"tag": "measured"})
    document["trace"] = {"file": "traced.trace.jsonl", "run_tokens": trace.run_tokens}
    write_jsonl(folder / "traced.trace.jsonl", lines if lines is not None else trace_lines(trace))
    write_toml_atomic(folder / "traced.toml", document)
    return folder / "traced.toml"


def _greedy_trace(seed=0, runs=3, length=60):
    rng = np.random.default_rng(seed)
    ranks = tuple(tuple([-1] + rng.choice([0, 0, 0, 1, 2, 9], size=length - 1).tolist()) for _ in range(runs))
    tops = tuple(np.sort(rng.dirichlet(np.ones(16), size=length), axis=1)[:, ::-1] for _ in range(runs))
    return AcceptanceTrace("traced", length - 8, ranks=ranks, top_probs=tops)


def test_a_written_trace_reads_back_and_replays_the_same(tmp_path):
    trace = _greedy_trace()
    path = _write(tmp_path, trace)
    read = Catalog.open().acceptance(str(path))
    assert read.trace.ranks == trace.ranks and read.trace.run_tokens == trace.run_tokens
    assert np.allclose(read.trace.top_probs[1], trace.top_probs[1], atol=1e-6)
    tree = parse_tree_spec("kary:2x3")
    assert replay(tree, read.trace) == replay(tree, trace)


def test_estimate_replays_a_traced_profile(tmp_path):
    trace = _greedy_trace(seed=1)
    path = _write(tmp_path, trace)
    args = ["estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--verify-device", "rtx-4090",
            "--tree", "chain:4", "--json"]
    traced = json.loads(CliRunner().invoke(cli, args + ["--acceptance", str(path)]).stdout)
    plain = json.loads(CliRunner().invoke(cli, args + ["--acceptance", "0.6,0.1"]).stdout)
    expected = replay(parse_tree_spec("chain:4"), trace)
    assert traced["acceptance_model"] == "trace replay" and plain["acceptance_model"] == "profile statistics"
    assert traced["expected_tokens_per_round"] == pytest.approx(expected.tokens_per_round)
    assert traced["hit_probability"] == pytest.approx(expected.hit_rate)
    assert plain["expected_tokens_per_round"] != pytest.approx(expected.tokens_per_round)


@pytest.mark.parametrize("line, message", [
    ({"ranks": [-1, 0, -3] + [0] * 60}, "ranks are integers"),
    ({"ranks": [-1, 0]}, "at least run_tokens"),
    ({"ranks": [-1] + [0] * 60, "colour": 1}, "unknown key"),
    ({"accept_probs": [0.0] + [1.5] * 60, "bonus_probs": [0.0] * 61}, "in \\[0, 1\\]"),
    ({}, "either ranks"),
    ({"ranks": [-1] + [0] * 60, "top_probs": [[0.5, 0.2]] * 30 + [[0.5]] * 31}, "same number of probabilities"),
    ({"ranks": [-1] + [0] * 60, "top_probs": [0.5] * 61}, "same number of probabilities"),
    ({"ranks": [-1] + [0] * 60, "top_probs": [[0.2, 0.5]] * 61}, "decreasing order"),
    # the K largest of one distribution sum to at most 1: [0.7, 0.6] cannot be (review of issue 13)
    ({"ranks": [-1] + [0] * 60, "top_probs": [[0.5, 0.2]] * 5 + [[0.7, 0.6]] * 56}, "top_probs\\[5\\].*sum 1.3"),
    ({"ranks": [-1] + [0] * 70, "top_probs": [[0.5, 0.2]] * 61}, "one row per position"),
    ({"accept_probs": [0.0] + [0.5] * 60, "bonus_probs": [0.0] * 61, "ranks": [-1] + [0] * 60}, "either ranks"),
])
def test_a_bad_trace_file_is_one_line(tmp_path, line, message):
    path = _write(tmp_path, _greedy_trace(), lines=[line])
    result = CliRunner().invoke(cli, ["acceptance", "show", str(path)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "traced.trace.jsonl:1" in result.stderr
    assert re.search(message, result.stderr)


def test_greedy_and_sampled_runs_do_not_mix(tmp_path):
    lines = [{"ranks": [-1] + [0] * 60}, {"accept_probs": [0.0] + [0.5] * 60, "bonus_probs": [0.0] * 61}]
    path = _write(tmp_path, _greedy_trace(), lines=lines)
    result = CliRunner().invoke(cli, ["acceptance", "show", str(path)])
    assert result.exit_code == 2 and "one kind" in result.stderr


def test_a_missing_trace_file_is_one_line(tmp_path):
    path = _write(tmp_path, _greedy_trace())
    (tmp_path / "traced.trace.jsonl").unlink()
    result = CliRunner().invoke(cli, ["acceptance", "show", str(path)])
    assert result.exit_code == 2 and "trace.file" in result.stderr and "no such file" in result.stderr


def test_a_missing_profile_file_says_so(tmp_path):
    result = CliRunner().invoke(cli, ["estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--verify-device",
                                      "rtx-4090", "--tree", "chain:4", "--acceptance", str(tmp_path / "nope.toml")])
    assert result.exit_code == 2 and "acceptance: no such file" in result.stderr and "nope.toml" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_search_grid_replays_a_traced_profile_as_estimate_does():
    from dfvg_dse.pipeline.grid import _static_shape

    trace = _greedy_trace(seed=2)
    profile = AcceptanceProfile("traced", (0.6, 0.1), source="a test", trace=trace)
    tree = parse_tree_spec("kary:2x2")
    shape = _static_shape("kary", (2, 2), tree, profile, 8)
    expected = replay(tree, trace)
    assert shape.expected_tokens == pytest.approx(expected.tokens_per_round) and shape.hit == pytest.approx(expected.hit_rate)


def test_top_probs_on_some_runs_only_and_a_one_token_run_are_refused(tmp_path):
    lines = [{"ranks": [-1] + [0] * 60, "top_probs": [[0.5, 0.2]] * 61}, {"ranks": [-1] + [0] * 60}]
    path = _write(tmp_path, _greedy_trace(), lines=lines)
    result = CliRunner().invoke(cli, ["acceptance", "show", str(path)])
    assert result.exit_code == 2 and "every run or on none" in result.stderr
    path = _write(tmp_path, _greedy_trace())
    path.write_text(path.read_text().replace("run_tokens = 52", "run_tokens = 1"))
    result = CliRunner().invoke(cli, ["acceptance", "show", str(path)])
    assert result.exit_code == 2 and "integer >= 2" in result.stderr


GOOD_ROUND = {"parents": [-1, 0, 0, 1], "ranks": [0, 0, 1, 0], "confidences": [1.0, 0.8, 0.1, 0.6], "accepted": [0, 1, 3]}


@pytest.mark.parametrize("change, field", [
    ({"ranks": [0, "a", 1, 0]}, "ranks[1]"),
    ({"ranks": 5}, "ranks"),
    ({"ranks": [0, -1, 1, 0]}, "ranks[1]"),  # would count in the last rank's slot
    ({"ranks": [0, 0, 0, 0]}, "ranks[2]"),  # two rank-0 children of the root
    ({"ranks": [0, 0, 1]}, "ranks"),
    ({"parents": [-1, 0, 0, True]}, "parents[3]"),
    ({"parents": [-1, 0, 3, 1]}, "parents[2]"),
    ({"accepted": [0, 1.0]}, "accepted[1]"),
    ({"accepted": [0, 2, 3]}, "accepted[2]"),
    ({"confidences": ["0.5", 1, 1, 1]}, "confidences[0]"),
    ({"confidences": [1.0, 0.5]}, "confidences"),
    ({"parents": None}, "parents"),
])
def test_acceptance_fit_names_the_trace_file_line_and_field(run, tmp_path, change, field):
    trace = tmp_path / "rounds.jsonl"
    bad = {k: v for k, v in {**GOOD_ROUND, **change}.items() if v is not None}
    trace.write_text(json.dumps(GOOD_ROUND) + "\n\n" + json.dumps(bad) + "\n")
    result = run("acceptance", "fit", str(trace), "-o", str(tmp_path / "p.toml"), "--bootstrap", "10")
    line = one_line_error(result, f"field '{field}'")
    assert line.startswith(f"Error: {trace}:3: ")  # the blank line 2 still counts
    assert not (tmp_path / "p.toml").exists()


def test_a_trace_without_rounds_names_its_file(run, tmp_path):
    trace = tmp_path / "empty.jsonl"
    trace.write_text("\n")
    one_line_error(run("acceptance", "fit", str(trace), "-o", str(tmp_path / "p.toml")), f"{trace}: no rounds")


@pytest.mark.parametrize("change, message", [
    ({"ranks": [0, 0, 0, 0]}, "distinct among siblings"),
    ({"ranks": [0, -1, 1, 0]}, "integers >= 0"),
    ({"parents": [-1, 0, 0, True]}, "earlier nodes"),
    ({"confidences": ["1", 1, 1, 1]}, "list of numbers"),
])
def test_rounds_built_in_memory_are_checked_the_same(change, message):
    with pytest.raises(InputError, match=message):
        check_round({**GOOD_ROUND, **change}, "decoder:4")


@pytest.mark.parametrize("line, field", [
    ({"accept_probs": [0.0] + [0.5] * 60, "bonus_probs": [0.0] * 70}, "bonus_probs"),  # ragged
    ({"accept_probs": [0.0] + [0.5] * 70, "bonus_probs": [0.0] * 61}, "bonus_probs"),
    ({"accept_probs": [0.0] + [0.5] * 60}, "bonus_probs"),
    ({"ranks": [-1] + [0] * 60, "bonus_probs": [0.0] * 61}, "accept_probs"),
    ({"ranks": [-1, 0, -1] + [0] * 60}, "ranks[2]"),  # -1 past position 0
])
def test_a_profile_trace_refuses_ragged_runs_and_negative_ranks(run, tmp_path, line, field):
    path = _write(tmp_path, _greedy_trace(), lines=[line])
    one_line_error(run("acceptance", "show", str(path)), "traced.trace.jsonl:1", f"field '{field}'")
