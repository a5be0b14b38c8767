"""estimate, compare and sensitivity through CliRunner."""

import json

import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli

REQUIRED = {"tokens_per_s", "j_per_token", "expected_tokens_per_round", "round_time_s", "speedup_vs_ar",
            "energy_efficiency_vs_ar", "feasible", "stages", "link"}


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


def test_estimate_json_contract_with_simulation(run):
    result = run("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "v80",
                 "--verify-device", "rtx-4090", "--tree", "chain:5", "--schedule", "overlap", "--simulate",
                 "--rounds", "5000", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert REQUIRED <= set(out) and out["feasible"] is True
    assert set(out["stages"]) == {"draft", "verify"} and out["stages"]["draft"]["device"] == "v80"
    assert {"time_s", "bound", "busy_fraction"} <= set(out["stages"]["verify"])
    assert out["link"]["name"] == "pcie-gen4-x16-host-staged" and out["link"]["down_bytes"] == 5 * 16
    assert abs(out["simulate"]["relative_error_tokens_per_s"]) < 0.02
    assert out["draft_nodes_per_round"] == 5 and out["tree"]["parents"] == [-1, 0, 1, 2, 3, 4]


def test_estimate_dynamic_and_default_optimal_tree(run):
    dynamic = json.loads(run("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "v80",
                             "--verify-device", "rtx-4090", "--dynamic", "adapt", "--rounds", "2000", "--json").stdout)
    assert dynamic["dynamic"]["rule"] == "AdaptRule" and dynamic["dynamic"]["k_max"] == 16
    assert dynamic["dynamic"]["min_depth"] >= 2 and dynamic["exact"] is False
    best = json.loads(run("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--verify-device", "rtx-4090",
                          "--json").stdout)
    chain = json.loads(run("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--verify-device",
                           "rtx-4090", "--tree", "chain:4", "--json").stdout)
    assert best["tokens_per_s"] >= chain["tokens_per_s"]  # the round-time-optimal tree beats a chain


def test_estimate_ar_and_text_output(run):
    ar = json.loads(run("estimate", "--target", "llama-2-7b", "--verify-device", "a100-80gb", "--schedule", "ar",
                        "--json").stdout)
    assert ar["speedup_vs_ar"] == pytest.approx(1.0) and ar["link"] is None
    text = run("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "v80", "--verify-device",
               "rtx-4090", "--tree", "kary:2x3").stdout
    assert "tokens/s" in text and "link pcie-gen4-x16-host-staged" in text and "% of the round" in text


def test_infeasible_design_is_reported_with_exit_0(run):
    result = run("estimate", "--target", "llama-2-70b", "--draft", "llama-160m", "--verify-device", "rtx-4090",
                 "--acceptance", "0.8", "--tree", "chain:4", "--json")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert out["feasible"] is False and "GB on 'rtx-4090'" in out["reason"]
    lanes = json.loads(run("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "v80",
                           "--verify-device", "rtx-4090", "--tree", "seq:40x1", "--json").stdout)
    assert lanes["feasible"] is False and "branch lanes" in lanes["reason"]


@pytest.mark.parametrize("args, message", [
    (["--draft", "qwen3-0.6b", "--verify-device", "v80x"], "unknown device 'v80x'"),
    (["--verify-device", "rtx-4090"], "--draft is required"),
    (["--draft", "qwen3-0.6b", "--verify-device", "rtx-4090", "--tree", "chain:2", "--dynamic", "adapt"],
     "give --tree or --dynamic"),
    (["--draft", "qwen3-0.6b", "--verify-device", "rtx-4090", "--link", "nvlink-4"], "no link is used"),
])
def test_estimate_errors_are_one_line(run, args, message):
    result = run("estimate", "--target", "qwen3-8b", *args)
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_compare_lists_every_scenario_and_the_ablation(run, tmp_path):
    plot = tmp_path / "c.png"
    result = run("compare", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--rounds", "500", "--plot", str(plot),
                 "--json")
    assert result.exit_code == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)["scenarios"]}
    assert set(rows) == {"ar", "sps", "specinfer", "duodecoding", "dovetail", "amusd", "dfvg", "hw-branch",
                         "+treesort", "+multicore", "+overlap"}
    assert rows["ar"]["speedup_vs_ar"] == pytest.approx(1.0) and rows["dfvg"]["speedup_vs_ar"] > 2
    assert rows["+multicore"]["speedup_vs_ar"] >= rows["hw-branch"]["speedup_vs_ar"]
    assert plot.stat().st_size > 10_000


@pytest.mark.slow
def test_sensitivity_finds_where_the_split_stops_paying(run, tmp_path):
    out = json.loads(run("sensitivity", "--vary", "batch", "--values", "1,64", "--rounds", "300", "--json").stdout)
    assert out["x"] == [1, 64] and set(out["speedup"]) == {"dfvg", "amusd", "specinfer", "sps"}
    assert out["speedup"]["dfvg"][0] > out["speedup"]["dfvg"][1]
    assert out["crossover"].startswith("the FPGA split")
