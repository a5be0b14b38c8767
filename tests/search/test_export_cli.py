"""search / sweep / pareto / export through the CLI, and engine configs against the engines' rules."""

import json

import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli
from dfvg_dse.report.engines import engine_config, hf_repo, limits


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def finished_run(run, tmp_path, small_study):
    result = run("search", "--method", "optuna", "--study", str(small_study), "--trials", "60", "--results-dir", str(tmp_path),
                 "--run-id", "r1", "--json")
    assert result.exit_code == 0, result.stderr
    return tmp_path / "r1", json.loads(result.stdout)


def test_search_writes_the_run_folder(finished_run):
    path, summary = finished_run
    for name in ("manifest.json", "trials.csv", "pareto.csv", "pareto.png", "recommended.json", "study.journal"):
        assert (path / name).is_file(), name
    assert not (path / "pareto.svg").exists()  # PNG alone unless --svg (issue 16: the SVG costs as much again)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["seed"] == 0 and manifest["inputs"]["target"] == "qwen3-8b" and "version" in manifest
    assert summary["trials"] == 60 and 0 < summary["hypervolume_fraction"] <= 1.0 + 1e-9
    assert set(json.loads((path / "recommended.json").read_text())) == {"max-throughput", "min-energy", "knee"}


def test_an_existing_run_is_never_overwritten_silently(run, finished_run, small_study):
    path, _ = finished_run
    again = run("search", "--method", "optuna", "--study", str(small_study), "--trials", "5", "--results-dir", str(path.parent),
                "--run-id", "r1")
    assert again.exit_code == 2 and "already exists; pass --force" in again.stderr


def test_pareto_redraws_and_sweep_scores_the_search(run, finished_run, small_study, tmp_path):
    path, _ = finished_run
    (path / "pareto.png").unlink()
    assert run("pareto", str(path)).exit_code == 0 and (path / "pareto.png").stat().st_size > 10_000
    assert not (path / "pareto.svg").exists()
    assert run("pareto", str(path), "--svg").exit_code == 0 and (path / "pareto.svg").read_text().startswith("<?xml")
    (path / "pareto.png").unlink()
    redrawn = run("pareto", str(path))  # a run with an SVG keeps it current
    assert redrawn.exit_code == 0 and "and .svg" in redrawn.stdout and (path / "pareto.png").is_file()
    sweep = json.loads(run("sweep", "--study", str(small_study), "--results-dir", str(tmp_path), "--run-id", "s1",
                           "--compare", str(path), "--json").stdout)
    assert sweep["grid_points"] > 100 and 0 < sweep["hypervolume_fraction"] <= 1.0 + 1e-9
    assert (tmp_path / "s1" / "pareto.csv").is_file()


@pytest.mark.parametrize("fmt", ["json", "vllm", "sglang", "hf", "trtllm"])
def test_export_every_format(run, finished_run, fmt):
    path, _ = finished_run
    result = run("export", str(path), "--pick", "max-throughput", "--format", fmt, "--json")
    assert result.exit_code == 0, result.stderr
    config = json.loads(result.stdout)
    name = "export-max-throughput.json" if fmt == "json" else f"export-max-throughput.{fmt}.json"
    assert json.loads((path / name).read_text()) == config
    if fmt != "json":
        assert config["engine_version"] and config["changes"] and config["realised"]["feasible"]
        people = run("export", str(path), "--pick", "max-throughput", "--format", fmt).stdout
        assert (config.get("command") or config["python"]).strip() in people and "searched" in people
    if fmt == "trtllm":  # the options file the command names, beside the JSON (JSON is YAML)
        options = path / "export-max-throughput.trtllm.yaml"
        assert json.loads(options.read_text()) == {k: v for k, v in config["llm_kwargs"].items() if k != "model"}
        assert options.name in config["command"]


def test_export_all_writes_every_engine_for_every_pick(run, finished_run):
    path, _ = finished_run
    result = run("export", str(path), "--pick", "all", "--format", "all")
    assert result.exit_code == 0, result.stderr
    for pick in ("max-throughput", "min-energy", "knee"):
        for fmt in ("vllm", "sglang", "hf", "trtllm"):
            assert (path / f"export-{pick}.{fmt}.json").is_file()
    assert "vLLM 0.33.0" in result.stdout and "TensorRT-LLM" in result.stdout


@pytest.mark.parametrize("args, message", [
    (("--format", "vllm", "--engine-version", "0.20.0"), "--engine-version 0.20.0: vllm release not checked"),
    (("--format", "all", "--engine-version", "0.33.0"), "--engine-version: give one engine's --format"),
    (("--format", "all", "-o", "x.json"), "--output: one design and one format only"),
    (("--pick", "knee", "--trial", "1"), "give --pick or --trial, not both"),
])
def test_export_refusals_are_one_line(run, finished_run, args, message):
    path, _ = finished_run
    result = run("export", str(path), *args)
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not list(path.glob("export-*"))  # nothing half-written


def test_export_of_a_run_without_its_request_says_so(run, finished_run):
    path, _ = finished_run
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["request"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    result = run("export", str(path), "--format", "vllm")
    assert result.exit_code == 2 and "no 'request'" in result.stderr
    assert run("export", str(path), "--format", "json").exit_code == 0  # our own format needs no re-pricing


DESIGN = {"target": "qwen3-8b", "draft": "qwen3-0.6b",
          "target_source": "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
          "draft_source": "https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json", "draft_device": "v80",
          "draft_kind": "fpga", "verify_device": "rtx-4090", "schedule": "overlap-fill", "batch": 1,
          "family": "optimal", "depth": 2, "parents": [-1, 0, 0, 1], "ranks": [0, 0, 1, 0], "dynamic": False}


def test_json_export_lists_the_tree_as_paths_and_engines_say_what_they_cannot_express():
    assert engine_config(DESIGN, "json")["choices"] == [[0], [1], [0, 0]]
    assert hf_repo(DESIGN["target_source"]) == "Qwen/Qwen3-8B"
    notes = " ".join(limits(DESIGN, "vLLM"))
    assert "FPGA" in notes and "overlap-fill" in notes
    assert limits({**DESIGN, "draft_kind": "gpu", "draft_device": "rtx-4090", "schedule": "sequential"}, "vLLM") == []


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
    result = run("search", "--method", "optuna", "--study", str(study), "--trials", "20", "--results-dir", str(tmp_path), "--run-id", "a",
                 "--json")
    assert result.exit_code == 0, result.stderr
    assert "hypervolume_fraction" not in json.loads(result.stdout)  # no exact front with Monte Carlo shapes
    trials = (tmp_path / "a" / "trials.csv").read_text()
    assert "adapt" in trials and "temperature" in trials
    exported = json.loads(run("export", str(tmp_path / "a"), "--format", "json", "--json").stdout)
    assert exported["parents"][0] == -1 and len(exported["parents"]) > 1
    assert run("sweep", "--study", str(study), "--results-dir", str(tmp_path), "--run-id", "s").exit_code == 0


def test_a_run_folder_keeps_the_storage_it_was_made_with(tmp_path):
    from dfvg_dse.cli.search import _run_storage
    assert _run_storage(tmp_path) == f"journal:{(tmp_path / 'study.journal').resolve()}"  # since issue 16
    (tmp_path / "study.db").write_bytes(b"")  # a run made before: its SQLite study stays its storage
    assert _run_storage(tmp_path) == f"sqlite:///{(tmp_path / 'study.db').resolve()}"
