"""`search --rate`: every design served under load, priced by what users get there."""

import json
import math

import pytest

from cli_checks import one_line_error
from dfvg_dse.pipeline.grid import SearchSpace
from dfvg_dse.search import evaluate_point
from dfvg_dse.search.designs import constraint_names
from dfvg_dse.serving import design_costs, serve
from dfvg_dse.specs import DecodeConfig, SystemSpec, TreeSpec
from dfvg_dse.specs.serving import LoadSpec, ServingSetup, engine_batching


def _space(catalog, rate=2.0, slo_tpot=0.05):
    cat = catalog.with_engine("trtllm")
    gpu, fpga = cat.device("rtx-4090"), cat.device("v80")
    setup = ServingSetup(cat.workload("sharegpt-vllm"), LoadSpec(rate, 20.0, 1.0, slo_tpot, seed=0))
    return SearchSpace(cat.model("qwen3-8b"), cat.model("qwen3-0.6b"), cat.pair_profile("qwen3-8b", "qwen3-0.6b"),
                       (gpu,), (fpga, gpu), (("v80", cat.link(fpga.host_link)),), families=("chain",),
                       depths=(2, 4, 6), batches=(1, 4, 64), serving=setup)


def test_a_point_under_load_is_the_design_served(catalog):
    space = _space(catalog)
    point = {"family": "chain", "width": 1, "depth": 4, "budget": 8, "schedule": "overlap-fill", "batch": 4,
             "draft_device": "v80", "verify_device": "rtx-4090", "fpga_pe_fraction": 1.0, "fpga_clock_mhz": 300.0}
    record = evaluate_point(space, point)
    chain = TreeSpec((-1, 0, 1, 2, 3), (0, 0, 0, 0, 0))
    fpga, gpu = space.draft_devices[0], space.verify_devices[0]
    config = DecodeConfig(space.target, SystemSpec(fpga, gpu, space.link_for(fpga)), space.draft, space.acceptance,
                          tree=chain, schedule="overlap", gpu_fill=True, context=space.context,
                          sync_s=space.sync_s, record_bytes=space.record_bytes)
    batching = engine_batching(gpu, speculate_max_batch=4)  # vLLM's defaults on the RTX 4090
    m = serve(config, design_costs(config, space.serving.workload, batching), space.serving.workload,
              space.serving.load, batching).metrics
    assert record["tokens_per_s_per_sequence"] == pytest.approx(1 / m.tpot_s["mean"])
    assert record["slo_attainment"] == m.slo_attainment and record["j_per_token"] == pytest.approx(m.j_per_token)
    assert record["feasible"] == (m.slo_attainment >= 0.9)
    assert len(record["constraints"]) == len(constraint_names(space)) == 4


def test_a_design_missing_the_slos_is_infeasible_with_its_shortfall(catalog):
    space = _space(catalog, rate=6.0, slo_tpot=0.012)  # a load the RTX 4090 cannot serve within 12 ms per token
    point = {"family": "chain", "width": 1, "depth": 6, "budget": 8, "schedule": "sequential", "batch": 64,
             "draft_device": "rtx-4090", "verify_device": "rtx-4090"}
    record = evaluate_point(space, point)
    assert not record["feasible"] and "within the SLOs" in record["reason"]
    assert record["constraints"][3] == pytest.approx(0.9 - record["slo_attainment"]) and record["constraints"][3] > 0


def test_search_under_load_from_the_command_line(run, tmp_path):
    result = run("search", "--rate", "1", "--slo-tpot", "50", "--slo-ttft", "1000", "--duration", "20",
                 "--trials", "24", "--results-dir", str(tmp_path), "--run-id", "load", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["under_load"]["rate_per_s"] == 1 and summary["method"] == "optuna"
    manifest = json.loads((tmp_path / "load" / "manifest.json").read_text())
    assert manifest["space"]["serving"]["slo_tpot_s"] == pytest.approx(0.05)
    trials = (tmp_path / "load" / "trials.csv").read_text().splitlines()
    header = trials[0].split(",")
    assert "slo_attainment" in header and "goodput_tokens_per_s" in header
    for rec in summary["recommended"].values():
        assert rec["tokens_per_s_per_sequence"] > 0 and math.isfinite(rec["j_per_token"])


def test_drafters_searched_under_load_from_the_command_line(run, tmp_path):
    # each drafter's own run is served under the load, and the joint front picks from their served trials
    result = run("search", "--rate", "1", "--slo-tpot", "50", "--slo-ttft", "1000", "--duration", "20",
                 "--trials", "10", "--drafter", "qwen3-0.6b", "--drafter", "eagle3-qwen3-8b=0.8",
                 "--results-dir", str(tmp_path), "--run-id", "d", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["under_load"]["rate_per_s"] == 1
    run_dir = tmp_path / "d"
    assert json.loads((run_dir / "manifest.json").read_text())["space"]["serving"]["slo_tpot_s"] == pytest.approx(0.05)
    import pandas as pd
    joint = pd.read_csv(run_dir / "trials.csv")
    for name in ("qwen3-0.6b", "eagle3-qwen3-8b"):
        assert json.loads((run_dir / name / "manifest.json").read_text())["space"]["serving"]["rate_per_s"] == 1
        own = pd.read_csv(run_dir / name / "trials.csv")
        assert "slo_attainment" in own.columns and (joint["drafter"] == name).sum() == len(own)
    for rec in summary["recommended"].values():
        own = pd.read_csv(run_dir / rec["run"] / "trials.csv").set_index("trial").loc[rec["run_trial"]]
        assert rec["tokens_per_s_per_sequence"] == pytest.approx(own["tokens_per_s_per_sequence"])
        assert rec["j_per_token"] == pytest.approx(own["j_per_token"])


@pytest.mark.parametrize("args,needles", [
    (["--rate", "1", "--method", "exact"], ["--method exact", "under load"]),
    (["--slo-tpot", "50"], ["--slo-tpot", "only with --rate"]),
    (["--rate", "1", "--drafter", "qwen3-0.6b"], ["--drafter", "2 to 16"]),
    (["--rate", "1", "--workload", "nosuch"], ["unknown workload"]),
    (["--rate", "100000", "--duration", "3600"], ["2,000,000"]),
])
def test_bad_load_flags_of_a_search_are_one_line(run, tmp_path, args, needles):
    one_line_error(run("search", "--trials", "3", "--results-dir", str(tmp_path), *args), *needles)
