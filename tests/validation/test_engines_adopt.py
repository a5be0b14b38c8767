"""`engines adopt` (issue 14, deliver 6): a `calibrate --torch-device` run's rows join the dataset on a
grid fixed before any fit, on a catalog GPU, in the shipped format, and the catalog reads them. The
run's file is made here with the shipped writer, as calibrate writes it (no torch needed)."""

import itertools
import json

import pytest

from cli_checks import one_line_error
from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.lookup import write_toml_atomic
from dfvg_dse.catalog.measurements import measurement_document
from dfvg_dse.specs.measurements import ForwardMeasurement, MeasurementSource
from dfvg_dse.validation.torch_calibration import DATASET_GRID, GRID, dataset_rows

RUN_ID = "local-cuda0-llama-3-1-8b"


def _run_rows(grid=GRID, model="llama-3.1-8b", engine="torch", phase="forward", device="local-cuda0"):
    """One row per grid point, its time a function of the point so that a mix-up shows."""
    return [ForwardMeasurement(RUN_ID, f"n={n}, c={c}, b={b}", engine, device, model, "bfloat16", b, phase,
                               c, n, "ms", 1.0 + n * b / 100 + c / 1e4, kv_dtype="bfloat16")
            for n, c, b in itertools.product(grid["tokens"], grid["contexts"], grid["batches"])]


def _write_run(folder, rows, engine="torch"):
    path = folder / f"{RUN_ID}.toml"
    source = MeasurementSource(RUN_ID, "forward", "layer microbenchmarks of llama-3.1-8b",
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


def test_adopted_rows_are_a_source_the_catalog_reads(run, tmp_path):
    path = _write_run(tmp_path, _run_rows())
    out = tmp_path / "hwdb" / "measurements"
    result = run("engines", "adopt", str(path), "--device", "h200", "--out", str(out), "--note", "driver 580", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["rows"] == 24 and record["rows_timed"] == 99
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


@pytest.mark.parametrize("case, needles", [
    ("not a torch run", ("not a calibrate --torch-device run", "vllm")),
    ("a quick run", ("no forward on the dataset grid",)),
    ("a CPU", ("allowed: a GPU",)),
    ("a CPU run", ("local-cpu", "not of a GPU")),
    ("an unknown GPU", ("h300",)),
])
def test_bad_input_is_one_line_and_writes_nothing(run, tmp_path, case, needles):
    rows = (_run_rows({"tokens": (2, 8), "contexts": (0, 256), "batches": (1, 2)}) if case == "a quick run"
            else _run_rows(device="local-cpu") if case == "a CPU run" else _run_rows())
    path = _write_run(tmp_path, rows, engine="vllm" if case == "not a torch run" else "torch")
    device = {"a CPU": "epyc-9654", "an unknown GPU": "h300"}.get(case, "h200")
    out = tmp_path / "out"
    one_line_error(run("engines", "adopt", str(path), "--device", device, "--out", str(out)), *needles)
    assert not out.exists() or not list(out.glob("*.toml"))
