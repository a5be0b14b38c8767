"""search / sweep / pareto / export through the CLI, and engine configs against the engines' rules."""

import ast
import json

import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli
from dfvg_dse.report.engines import engine_config, hf_repo


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def finished_run(run, tmp_path, small_study):
    result = run("search", "--study", str(small_study), "--trials", "60", "--results-dir", str(tmp_path),
                 "--run-id", "r1", "--json")
    assert result.exit_code == 0, result.stderr
    return tmp_path / "r1", json.loads(result.stdout)


def test_search_writes_the_run_folder(finished_run):
    path, summary = finished_run
    for name in ("manifest.json", "trials.csv", "pareto.csv", "pareto.png", "pareto.svg", "recommended.json",
                 "study.db"):
        assert (path / name).is_file(), name
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["seed"] == 0 and manifest["inputs"]["target"] == "qwen3-8b" and "version" in manifest
    assert summary["trials"] == 60 and 0 < summary["hypervolume_fraction"] <= 1.0 + 1e-9
    assert set(json.loads((path / "recommended.json").read_text())) == {"max-throughput", "min-energy", "knee"}


def test_an_existing_run_is_never_overwritten_silently(run, finished_run, small_study):
    path, _ = finished_run
    again = run("search", "--study", str(small_study), "--trials", "5", "--results-dir", str(path.parent),
                "--run-id", "r1")
    assert again.exit_code == 2 and "already exists; pass --force" in again.stderr


def test_pareto_redraws_and_sweep_scores_the_search(run, finished_run, small_study, tmp_path):
    path, _ = finished_run
    (path / "pareto.png").unlink()
    assert run("pareto", str(path)).exit_code == 0 and (path / "pareto.png").stat().st_size > 10_000
    sweep = json.loads(run("sweep", "--study", str(small_study), "--results-dir", str(tmp_path), "--run-id", "s1",
                           "--compare", str(path), "--json").stdout)
    assert sweep["grid_points"] > 100 and 0 < sweep["hypervolume_fraction"] <= 1.0 + 1e-9
    assert (tmp_path / "s1" / "pareto.csv").is_file()


@pytest.mark.parametrize("fmt", ["json", "vllm", "sglang", "hf", "trtllm"])
def test_export_every_format(run, finished_run, fmt):
    path, _ = finished_run
    result = run("export", str(path), "--pick", "max-throughput", "--format", fmt)
    assert result.exit_code == 0, result.stderr
    config = json.loads(result.stdout)
    name = "export-max-throughput.json" if fmt == "json" else f"export-max-throughput.{fmt}.json"
    assert (path / name).is_file()
    if fmt != "json":
        assert "unsupported" in config


DESIGN = {"target": "qwen3-8b", "draft": "qwen3-0.6b",
          "target_source": "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
          "draft_source": "https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json", "draft_device": "v80",
          "draft_kind": "fpga", "verify_device": "rtx-4090", "schedule": "overlap-fill", "batch": 1,
          "family": "optimal", "depth": 2, "parents": [-1, 0, 0, 1], "ranks": [0, 0, 1, 0], "dynamic": False}
CHAIN = {**DESIGN, "draft_kind": "gpu", "draft_device": "rtx-4090", "schedule": "sequential", "family": "chain",
         "depth": 5, "parents": [-1, 0, 1, 2, 3, 4], "ranks": [0] * 6}


def test_vllm_tree_length_matches_num_speculative_tokens():
    # T15 (vLLM SpeculativeConfig, <= 0.20): the tree literal's length is num_speculative_tokens
    config = engine_config(DESIGN, "vllm")["speculative_config"]
    tree = ast.literal_eval(config["speculative_token_tree"])
    assert config["num_speculative_tokens"] == len(tree) == 3 and tree == [(0,), (1,), (0, 0)]
    assert config["model"] == "Qwen/Qwen3-0.6B" and hf_repo(DESIGN["target_source"]) == "Qwen/Qwen3-8B"
    assert "speculative_token_tree" not in engine_config(CHAIN, "vllm")["speculative_config"]


def test_sglang_topk_one_forces_steps_plus_one():
    # T14: --speculative-eagle-topk 1 with --speculative-num-steps 5 forces --speculative-num-draft-tokens 6
    flags = engine_config(CHAIN, "sglang")["flags"]
    assert flags["--speculative-eagle-topk"] == 1 and flags["--speculative-num-steps"] == 5
    assert flags["--speculative-num-draft-tokens"] == 6
    tree = engine_config(DESIGN, "sglang")["flags"]
    assert tree["--speculative-eagle-topk"] == 2 and tree["--speculative-num-draft-tokens"] == 4  # root counted


def test_exports_say_what_the_engine_cannot_express():
    notes = " ".join(engine_config(DESIGN, "vllm")["unsupported"])
    assert "FPGA" in notes and "overlap-fill" in notes
    assert engine_config(CHAIN, "hf")["generate_kwargs"] == {
        "assistant_model": "Qwen/Qwen3-0.6B", "num_assistant_tokens": 5, "num_assistant_tokens_schedule": "constant"}
    assert engine_config(CHAIN, "trtllm")["DraftTargetDecodingConfig"]["max_draft_len"] == 5
    assert engine_config(DESIGN, "trtllm")["EagleDecodingConfig"]["eagle_choices"] == [[0], [1], [0, 0]]


ADAPT_STUDY = """
[models]
target = "qwen3-8b"
draft = "qwen3-0.6b"
[hardware]
draft_devices = ["v80"]
[space]
families = ["adapt", "chain"]
widths = [8, 16]
budgets = [32]
thresholds = [0.0, 0.1]
temperatures = [0.0, 0.5]
depths = [4, 8]
batches = [1]
fpga_pe_fractions = [1.0]
fpga_clocks_mhz = [300.0]
"""


def test_adapt_designs_are_searched_and_exported_as_their_expected_tree(run, tmp_path):
    study = tmp_path / "adapt.toml"
    study.write_text(ADAPT_STUDY)
    result = run("search", "--study", str(study), "--trials", "20", "--results-dir", str(tmp_path), "--run-id", "a",
                 "--json")
    assert result.exit_code == 0, result.stderr
    assert "hypervolume_fraction" not in json.loads(result.stdout)  # no exact front with Monte Carlo shapes
    trials = (tmp_path / "a" / "trials.csv").read_text()
    assert "adapt" in trials and "temperature" in trials
    exported = json.loads(run("export", str(tmp_path / "a"), "--format", "json").stdout)
    assert exported["parents"][0] == -1 and len(exported["parents"]) > 1
    assert run("sweep", "--study", str(study), "--results-dir", str(tmp_path), "--run-id", "s").exit_code == 0
