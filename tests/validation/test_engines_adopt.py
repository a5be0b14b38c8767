"""`engines adopt` (issue 14, deliver 6): a `calibrate --torch-device` run's rows join the dataset on a
grid fixed before any fit, on a catalog GPU, in the shipped format, and the catalog reads them. The
run's file is made here with the shipped writer, as calibrate writes it (no torch needed)."""

import dataclasses
import itertools
import json

import pytest

from cli_checks import one_line_error
from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.lookup import write_toml_atomic
from dfvg_dse.catalog.measurements import measurement_document
from dfvg_dse.specs.measurements import ForwardMeasurement, MeasurementSource
from dfvg_dse.validation.torch_calibration import DATASET_GRID, GRID, QUICK_GRID, dataset_rows

RUN_ID = "local-cuda0-llama-3-1-8b"


def _run_rows(grid=GRID, model="llama-3.1-8b", engine="torch", phase="forward", device="local-cuda0", run_id=RUN_ID):
    """One row per grid point, its time a function of the point so that a mix-up shows."""
    return [ForwardMeasurement(run_id, f"n={n}, c={c}, b={b}", engine, device, model, "bfloat16", b, phase,
                               c, n, "ms", 1.0 + n * b / 100 + c / 1e4, kv_dtype="bfloat16")
            for n, c, b in itertools.product(grid["tokens"], grid["contexts"], grid["batches"])]


def _mixed(rows, **change):
    """The rows with the last one changed (a ragged run)."""
    return rows[:-1] + [dataclasses.replace(rows[-1], **change)]


def _write_run(folder, rows, engine="torch", run_id=RUN_ID):
    path = folder / f"{run_id}.toml"
    source = MeasurementSource(run_id, "forward", "layer microbenchmarks of llama-3.1-8b",
                               "local: dfvg-dse calibrate --torch-device cuda:0 on host, 2026-12-05 10:00 UTC",
                               engine, "2.11.0+cu130", "2026-12", tuple(rows))
    write_toml_atomic(path, measurement_document(source))
    return path


def test_dataset_rows_keep_exactly_the_grid():
    rows = _run_rows()
    kept = dataset_rows(rows, "h200", "torch-h200-calibrate-llama-3-1-8b")
    expected = set(itertools.product(DATASET_GRID["tokens"], DATASET_GRID["contexts"], DATASET_GRID["batches"]))
    assert {(r.generated_tokens, r.prompt_tokens, r.batch) for r in kept} == expected  # brute force over the grid
    assert len(kept) == 24 < len(rows) == 99
    assert {r.device for r in kept} == {"h200"} and {r.source for r in kept} == {"torch-h200-calibrate-llama-3-1-8b"}
    by_point = {(r.generated_tokens, r.prompt_tokens, r.batch): r.value for r in rows}
    assert all(r.value == by_point[(r.generated_tokens, r.prompt_tokens, r.batch)] for r in kept)


def test_a_dataset_grid_run_is_adopted_whole(run, tmp_path):
    # what benchmarks/gpu_recalibrate.sh brings back: calibrate --dataset-grid, the 24 forwards and nothing else
    path = _write_run(tmp_path, _run_rows(DATASET_GRID))
    out = tmp_path / "hwdb" / "measurements"
    result = run("engines", "adopt", str(path), "--device", "h200", "--out", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    source = next(s for s in Catalog.open(hwdb_dir=tmp_path / "hwdb").measurements()
                  if s.id == "torch-h200-calibrate-llama-3-1-8b")
    assert len(source.rows) == 24 and "24 of the 24 the run timed" in (out / f"{source.id}.toml").read_text()


def test_several_runs_are_adopted_together_or_not_at_all(run, tmp_path):
    # what gpu_recalibrate.sh brings back: a run a model, adopted in one command
    qwen = "local-cuda0-qwen3-8b"
    paths = [_write_run(tmp_path, _run_rows(DATASET_GRID)),
             _write_run(tmp_path, _run_rows(DATASET_GRID, model="qwen3-8b", run_id=qwen), run_id=qwen)]
    out = tmp_path / "hwdb" / "measurements"
    bad = _write_run(tmp_path, _run_rows(QUICK_GRID, model="llama-2-7b", run_id="bad"), run_id="bad")
    one_line_error(run("engines", "adopt", *map(str, paths), str(bad), "--device", "h200", "--out", str(out)),
                   "bad.toml", "missing")
    assert not out.exists()  # the good files are not written when one is refused
    one_line_error(run("engines", "adopt", str(paths[0]), str(paths[0]), "--device", "h200", "--out", str(out)),
                   "the same model on the same GPU")
    result = run("engines", "adopt", *map(str, paths), "--device", "h200", "--out", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    assert [(a["model"], a["rows"]) for a in json.loads(result.stdout)["adopted"]] == [("llama-3.1-8b", 24), ("qwen3-8b", 24)]
    ids = {s.id for s in Catalog.open(hwdb_dir=tmp_path / "hwdb").measurements()}
    assert {"torch-h200-calibrate-llama-3-1-8b", "torch-h200-calibrate-qwen3-8b"} <= ids


def test_a_write_that_fails_replaces_none_of_the_files(run, tmp_path):
    # a re-measurement (--replace) of two models where the second file cannot be written: the first keeps
    # its earlier content, so the dataset is never half new and half old
    qwen = "local-cuda0-qwen3-8b"
    paths = [_write_run(tmp_path, _run_rows(DATASET_GRID)),
             _write_run(tmp_path, _run_rows(DATASET_GRID, model="qwen3-8b", run_id=qwen), run_id=qwen)]
    out = tmp_path / "hwdb" / "measurements"
    out.mkdir(parents=True)
    earlier = out / "torch-h200-calibrate-llama-3-1-8b.toml"
    earlier.write_text("an earlier adoption")
    (out / "torch-h200-calibrate-qwen3-8b.toml").mkdir()  # in the way of the second file
    one_line_error(run("engines", "adopt", *map(str, paths), "--device", "h200", "--out", str(out), "--replace"),
                   "torch-h200-calibrate-qwen3-8b.toml", "folder")
    assert earlier.read_text() == "an earlier adoption"
    assert sorted(p.name for p in out.iterdir()) == ["torch-h200-calibrate-llama-3-1-8b.toml",
                                                     "torch-h200-calibrate-qwen3-8b.toml"]  # no temporary left


def test_adopted_rows_are_a_source_the_catalog_reads(run, tmp_path):
    path = _write_run(tmp_path, _run_rows())
    out = tmp_path / "hwdb" / "measurements"
    result = run("engines", "adopt", str(path), "--device", "h200", "--out", str(out), "--note", "driver 580", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["device"] == "h200" and [(a["rows"], a["model"]) for a in record["adopted"]] == [(24, "llama-3.1-8b")]
    catalog = Catalog.open(hwdb_dir=tmp_path / "hwdb")
    source = next(s for s in catalog.measurements() if s.id == "torch-h200-calibrate-llama-3-1-8b")
    assert source.engine == "torch" and len(source.rows) == 24 and "NVIDIA H200" in source.title
    # what the shipped files' test asks of this project's own GPU runs (tests/catalog/test_measurement_files.py)
    assert source.url.startswith("local: measured by this project") and "calibrate --torch-device" in source.url
    assert "(h200)" in source.url
    assert {r.device for r in source.rows} == {"h200"} and {r.phase for r in source.rows} == {"forward"}
    assert source.rows[0].measured_time_s == pytest.approx(1.01e-3)  # n=1, c=0, b=1: 1 + 1/100 ms
    # a second adoption of the same GPU and model is refused unless it says it replaces the first
    one_line_error(run("engines", "adopt", str(path), "--device", "h200", "--out", str(out)), "exists", "--replace")
    assert run("engines", "adopt", str(path), "--device", "h200", "--out", str(out), "--replace").exit_code == 0


BAD_RUNS = {  # case: (the run's rows, its engine, --device, words of the one-line error)
    "another engine's file": (_run_rows(), "vllm", "h200", ("engine 'vllm'", "calibrate --torch-device")),
    "a quick run": (_run_rows(QUICK_GRID), "torch", "h200", ("missing", "full-grid or --dataset-grid run")),
    "a CPU run": (_run_rows(device="local-cpu"), "torch", "h200", ("device 'local-cpu'",)),
    "two devices": (_mixed(_run_rows(), device="local-cuda1"), "torch", "h200", ("'local-cuda0', 'local-cuda1'",)),
    "a prefill row": (_mixed(_run_rows(), phase="prefill"), "torch", "h200", ("phase 'forward', 'prefill'",)),
    "two models": (_mixed(_run_rows(), model="qwen3-8b"), "torch", "h200", ("2 models",)),
    "a model the catalog lacks": (_run_rows(model="llama-9-9b"), "torch", "h200", ("llama-9-9b", "no model")),
    "a CPU device": (_run_rows(), "torch", "epyc-9654", ("allowed: a GPU",)),
    "a GPU group": (_run_rows(), "torch", "4xh100-sxm", ("allowed: a GPU",)),
    "an unknown GPU": (_run_rows(), "torch", "h300", ("h300", "allowed: a GPU")),
}


@pytest.mark.parametrize("case", sorted(BAD_RUNS))
def test_bad_input_is_one_line_and_writes_nothing(run, tmp_path, case):
    rows, engine, device, needles = BAD_RUNS[case]
    path = _write_run(tmp_path, rows, engine=engine)
    out = tmp_path / "out"
    one_line_error(run("engines", "adopt", str(path), "--device", device, "--out", str(out)), *needles)
    assert not out.exists()


def test_a_speculative_file_is_one_line(run, tmp_path):
    spec = Catalog.open().measurements("speculative")[0]
    one_line_error(run("engines", "adopt", spec.path, "--device", "h200", "--out", str(tmp_path / "out")),
                   "kind 'speculative'")
