"""`serve-sim` from the command line: a sweep with baselines and a plot, JSON, and refusals."""

import json

import pytest

from cli_checks import one_line_error

DFVG = ["serve-sim", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "v80",
        "--verify-device", "rtx-4090", "--schedule", "overlap", "--gpu-fill", "--tree", "chain:6", "--duration", "20"]


def test_a_sweep_compares_the_design_with_its_baselines(run, tmp_path):
    plot = tmp_path / "serving.png"
    result = run(*DFVG, "--rate", "0.5,2,6", "--slo-tpot", "50", "--slo-ttft", "2000", "--plot", str(plot), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [r["design"] for r in doc["runs"]] == ["design"] * 3 + ["ar"] * 3 + ["colocated"] * 3
    assert plot.stat().st_size > 10_000
    assert {c["baseline"] for c in doc["crossovers"]} == {"ar", "colocated"}
    by = {(r["design"], r["offered_rate_per_s"]): r for r in doc["runs"]}
    # at low load the split decodes faster than AR on the same GPU, and every run names its SLOs
    assert by[("design", 0.5)]["tpot_s"]["p50"] < by[("ar", 0.5)]["tpot_s"]["p50"]
    assert doc["slo_tpot_s"] == pytest.approx(0.05) and doc["workload"]["name"] == "sharegpt-vllm"
    table = run(*DFVG, "--rate", "0.5,2", "--baseline", "ar")
    assert table.exit_code == 0 and "design against ar: " in table.stdout and "TPOT p50" in table.stdout


@pytest.mark.parametrize("args,needles", [
    (["--rate", "2,1"], ["--rate", "ascending"]),
    (["--rate", "fast"], ["--rate", "requests per second"]),
    (["--rate", "0"], ["--rate", "(0, 1e6]"]),
    ([], ["--rate is required"]),
    (["--rate", "1", "--plot", "out.txt"], ["--plot"]),
])
def test_bad_serving_options_are_one_line(run, args, needles):
    one_line_error(run(*DFVG, *args), *needles)


def test_an_ar_design_runs_alone(run):
    result = run("serve-sim", "--target", "llama-3.1-8b", "--verify-device", "h100-sxm", "--schedule", "ar",
                 "--rate", "4", "--duration", "10", "--json")
    doc = json.loads(result.stdout)
    assert [r["design"] for r in doc["runs"]] == ["design"] and doc["crossovers"] == []
    assert doc["runs"][0]["speculative_share"] == 0.0


def _record(design, rate, tpot, attainment):
    return {"design": design, "offered_rate_per_s": rate, "tpot_s": {"p50": tpot}, "slo_attainment": attainment}


def test_crossovers_read_the_sweep():
    from dfvg_dse.report.serving import crossovers

    records = [_record("design", r, t, a) for r, t, a in ((1, 0.01, 1.0), (2, 0.015, 1.0), (4, 0.03, 0.95), (8, 0.05, 0.5))]
    records += [_record("ar", r, t, a) for r, t, a in ((1, 0.02, 1.0), (2, 0.021, 1.0), (4, 0.025, 1.0), (8, 0.03, 0.97))]
    (c,) = crossovers(records, "design", ["ar"])
    assert c["tpot_no_better_from_rate"] == 4 and c["slo_attainment_lower_from_rate"] == 4
    assert c["stops_paying_from_rate"] == 4
    assert c["design_slo_capacity_per_s"] == 4 and c["baseline_slo_capacity_per_s"] == 8



def test_runs_without_requests_or_tpot_still_plot(run, tmp_path):
    """A rate that draws no request, and one-token outputs, leave gaps in the plot and '-' in the table."""
    plot = tmp_path / "empty.png"
    result = run("serve-sim", "--target", "llama-3.1-8b", "--verify-device", "h100-sxm", "--schedule", "ar",
                 "--rate", "0.01,0.02", "--duration", "5", "--plot", str(plot))
    assert result.exit_code == 0, result.output
    assert plot.is_file() and " - " in result.stdout
    one = tmp_path / "one.toml"
    one.write_text('name = "one"\nsource = "s"\ntag = "derived"\n[prompt]\nkind = "fixed"\nmean = 50\n'
                   '[output]\nkind = "fixed"\nmean = 1\n')
    result = run(*DFVG, "--workload", str(one), "--rate", "1,2", "--plot", str(tmp_path / "one.png"), "--json")
    assert result.exit_code == 0, result.output
    assert all(r["tpot_s"]["p50"] is None for r in json.loads(result.stdout)["runs"])


def test_a_load_past_the_limits_is_refused_before_any_work(run):
    one_line_error(run(*DFVG, "--rate", "1,100000", "--duration", "3600"), "2,000,000")
    one_line_error(run(*DFVG, "--rate", "1,2000", "--duration", "600"), "iterations")
