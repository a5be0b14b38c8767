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
                                                               "serving.csv", "heterogeneous.csv", "anchors.png"}


def test_speculative_results_are_predicted_not_fitted(report):
    document, _ = report
    spec = document["speculative"]
    assert len(spec) >= 25 and len({r["source"] for r in spec}) >= 4
    for r in spec:  # a speedup is tau x t_AR / round time: below tau, above 0
        assert 0 < r["predicted_speedup"] < r["mean_accepted_tokens"]
        assert r["error"] == pytest.approx(r["predicted_speedup"] / r["published_speedup"] - 1)


def test_the_time_per_token_is_predicted_where_a_source_prints_it(report):
    document, _ = report
    spec = document["speculative"]
    for r in spec:  # a round's time over its tokens: the AR step's time over the speedup, in ms
        assert r["predicted_ms_per_token"] > 0
        if r["published_ms_per_token"] is None:
            assert r["ms_per_token_error"] is None
        else:
            assert r["ms_per_token_error"] == pytest.approx(r["predicted_ms_per_token"] / r["published_ms_per_token"] - 1)
    published = [r for r in spec if r["published_ms_per_token"] is not None]
    assert len(published) >= 14  # Sequoia's TBT column (spec-sequoia-paper.toml)
    summary = document["speculative_time_per_token"]
    assert summary["rows"] == len(published)
    assert summary["median_abs_error"] <= summary["max_abs_error"] == max(abs(r["ms_per_token_error"]) for r in published)


def test_dfvgs_own_speedups_are_what_compare_preset_predicts(report, run):
    # the same report carries DFVG's published figures (issue 14, deliver 5): the full design on each
    # pair it prints a speedup for and the ablation's steps, each predicted as `compare --preset
    # dfvg-paper` predicts it (computed there over every scenario from the same AR baseline)
    from dfvg_dse.pipeline.presets import PRESETS

    document, out = report
    rows = document["heterogeneous"]
    paper = PRESETS["dfvg-paper"]["paper"]
    assert [(r["target"], r["scenario"], r["published_speedup"]) for r in rows] == [
        ("vicuna-7b", "dfvg", 2.44), ("qwen3-8b", "dfvg", 3.26), ("qwen3-8b", "hw-branch", 2.21),
        ("qwen3-8b", "+treesort", 2.46), ("qwen3-8b", "+multicore", 3.08)]
    assert paper["ablation"]["+overlap"] == paper["speedup"]["qwen3-8b"]  # the last step is the headline's row
    compared = json.loads(run("compare", "--preset", "dfvg-paper", "--json").stdout)
    predicted = {(c["target"], s["name"]): s["speedup_vs_ar"] for c in compared["runs"] for s in c["scenarios"]}
    for r in rows:
        assert r["predicted_speedup"] == pytest.approx(predicted[(r["target"], r["scenario"])], rel=1e-9)
        assert r["error"] == pytest.approx(r["predicted_speedup"] / r["published_speedup"] - 1)
        assert r["acceptance_source"]  # the paper's token-level rate, or an assumption that says so
    assert (out / "heterogeneous.csv").is_file()


def test_a_budget_broken_exits_1_and_says_which(run, tmp_path):
    result = run("validate", "--anchors", "--out", str(tmp_path), "--median-budget", "0.001")
    assert result.exit_code == 1 and "budget broken: forward all: leave-one-source-out median" in result.stderr
    # the text report states the gated speculative median and carries DFVG's table beside the others
    assert "speculative speedups, " in result.stdout and "DFVG (ASPLOS 2026), not gated" in result.stdout


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
