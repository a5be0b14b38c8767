"""`validate --anchors` (issue 14): every published row predicted in-sample and leave-one-source-out,
the speculative speedups predicted from their published acceptance, budgets that gate; `--engine`
on the pricing commands."""

import json

import pytest

from cli_checks import one_line_error

COST = ["cost", "--model", "llama-2-7b", "--device", "a100-80gb", "--tokens", "1,512", "--context", "100", "--json"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from click.testing import CliRunner

    from dfvg_dse.cli import cli

    out = tmp_path_factory.mktemp("anchors")
    result = CliRunner().invoke(cli, ["validate", "--anchors", "--out", str(out), "--json", "--median-budget", "10",
                                      "--p90-budget", "10", "--speculative-budget", "10"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), out


def test_every_row_is_reported_with_both_errors(report):
    document, out = report
    rows = document["forward"]
    assert len(rows) >= 80 and {r["phase"] for r in rows} >= {"decode", "prefill", "generate"}
    for r in rows:
        assert r["measured_s"] > 0 and r["predicted_s"] > 0 and r["loso_predicted_s"] > 0
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
    categories = {s["category"]: s for s in document["summary"]}
    assert {"all", "decode", "prefill", "quantised", "engine trtllm"} <= set(categories)
    assert categories["all"]["rows"] == len(rows)
    # leave-one-source-out never beats the fit that saw the row (in the median)
    inside = {s["category"]: s for s in document["in_sample_summary"]}
    assert categories["all"]["median_abs_error"] >= inside["all"]["median_abs_error"]
    assert {p.split("/")[-1] for p in document["written"]} == {"anchors.csv", "anchors-summary.csv", "speculative.csv", "set-aside.csv",
                                                               "serving.csv", "anchors.png"}


def test_speculative_results_are_predicted_not_fitted(report):
    document, _ = report
    spec = document["speculative"]
    assert len(spec) >= 25 and len({r["source"] for r in spec}) >= 4
    for r in spec:  # a speedup is tau x t_AR / round time: below tau, above 0
        assert 0 < r["predicted_speedup"] < r["mean_accepted_tokens"]
        assert r["error"] == pytest.approx(r["predicted_speedup"] / r["published_speedup"] - 1)


def test_a_budget_broken_exits_1_and_says_which(run, tmp_path):
    result = run("validate", "--anchors", "--out", str(tmp_path), "--median-budget", "0.001")
    assert result.exit_code == 1 and "budget broken: forward all: leave-one-source-out median" in result.stderr


def test_the_engine_prices_the_forward(run):
    plain = json.loads(run(*COST, "--engine", "roofline").stdout)
    fitted = json.loads(run(*COST, "--engine", "trtllm").stdout)
    default = json.loads(run(*COST).stdout)
    assert [r["engine"] for r in plain + fitted] == ["roofline"] * 2 + ["trtllm"] * 2
    assert default == fitted  # TensorRT-LLM is the default
    assert plain[0]["time_s"] != fitted[0]["time_s"]
    one_line_error(run(*COST, "--engine", "tgi"), "unknown engine 'tgi'", "roofline")


def test_a_search_keeps_its_engine_on_resume(run, tmp_path):
    study = tmp_path / "s.toml"
    study.write_text('[space]\nfamilies = ["chain"]\ndepths = [2, 4]\nbatches = [1]\n')
    args = ["search", "--study", str(study), "--results-dir", str(tmp_path), "--run-id", "r", "--json"]
    assert run(*args, "--trials", "8", "--engine", "vllm").exit_code == 0
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["request"]["engine"] == "vllm"
    assert run("search", "--results-dir", str(tmp_path), "--run-id", "r", "--trials", "10", "--resume",
               "--json").exit_code == 0
    refused = run(*args, "--trials", "12", "--resume", "--engine", "trtllm")
    one_line_error(refused, "--resume", "differ")
