"""`calibrate --torch-device` (issue 14, deliver 6): a device's own whole-model forwards become its
hwdb entry, an engine profile fitted to them and the rows, files the other commands use. On CPU in
CI; the same command on a GPU is what docs/engines.md asks a user with one to run."""

import json

import numpy as np
import pytest

from cli_checks import one_line_error

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    from click.testing import CliRunner

    from dfvg_dse.cli import cli

    out = tmp_path_factory.mktemp("torch-calibration")
    result = CliRunner().invoke(cli, ["calibrate", "--torch-device", "cpu", "--model", "llama-68m", "--quick",
                                      "--dtype", "float32", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), out


def test_the_files_read_back_and_price_the_device(calibrated):
    from dfvg_dse.catalog import Catalog
    from dfvg_dse.costs.processor import processor_forward_cost

    record, out = calibrated
    catalog = Catalog.open(hwdb_dir=out / "hwdb")
    device = catalog.device("local-cpu")
    assert device.engine is not None and device.engine.name == "torch-local-cpu" == record["engine"]
    assert device.peak_for("fp32") == pytest.approx(record["peak_flops_per_s"], rel=1e-3)
    source = next(s for s in catalog.measurements() if s.id == "local-cpu-llama-68m")
    assert len(source.rows) == record["rows"] == 16 and {r.phase for r in source.rows} == {"forward"}
    model = catalog.model("llama-68m").with_dtypes("float32", "float16")
    errors = []
    for row in source.rows:  # the shipped cost path, through the written profile, against the measured rows
        predicted = float(processor_forward_cost(model, device, row.generated_tokens, row.prompt_tokens,
                                                 row.batch).time_s)
        errors.append(predicted / row.measured_time_s - 1)
    assert np.median(np.abs(errors)) == pytest.approx(record["median_abs_error"], abs=0.02)  # rounding of the file
    assert {p.split("/")[-2] for p in record["written"]} == {"engines", "cpu", "measurements"}


def test_a_device_torch_does_not_know_is_one_line(run, tmp_path):
    one_line_error(run("calibrate", "--torch-device", "tpu:0", "--out", str(tmp_path / "o")), "--torch-device", "cpu")
    assert not (tmp_path / "o").exists()


def test_the_dataset_grid_times_only_what_adopt_keeps(run, tmp_path, monkeypatch):
    # the GPU loan's re-measurement (benchmarks/gpu_recalibrate.sh): only the 24 forwards `engines adopt` keeps;
    # the timing itself is replaced here (test_torch_bench times real forwards), what is asked and written is checked
    import itertools

    from dfvg_dse.catalog import Catalog
    from dfvg_dse.reference import torch_bench
    from dfvg_dse.validation.torch_calibration import DATASET_GRID

    asked = []

    def fake_benchmark(model, device, dtype, tokens, contexts, batches, layers, repeats, seed):
        asked.append((tokens, contexts, batches))
        return [{"tokens": n, "context": c, "batch": b, "layers": 1, "depth": model.n_layers,
                 "seconds": 1e-3 * (1 + n * b / 64 + c / 4096)} for n in tokens for c in contexts for b in batches]

    monkeypatch.setattr(torch_bench, "peak_matmul_flops_per_s", lambda *a, **k: 1e12)
    monkeypatch.setattr(torch_bench, "copy_bandwidth_bytes_per_s", lambda *a, **k: 1e11)
    monkeypatch.setattr(torch_bench, "benchmark", fake_benchmark)
    result = run("calibrate", "--torch-device", "cpu", "--model", "llama-68m", "--dataset-grid", "--dtype", "float32",
                 "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert asked == [tuple(list(v) for v in DATASET_GRID.values())]
    source = next(s for s in Catalog.open(hwdb_dir=tmp_path / "o" / "hwdb").measurements() if s.id == "local-cpu-llama-68m")
    assert {(r.generated_tokens, r.prompt_tokens, r.batch) for r in source.rows} == set(itertools.product(*DATASET_GRID.values()))
    assert source.title.startswith("whole-model forwards of llama-68m: 2 decoder layers cycling through the random "
                                   "weights of 1 distinct layer,")


@pytest.mark.parametrize("args, named", [
    (["--torch-device", "cpu", "--quick", "--dataset-grid"], "--dataset-grid: not used with --quick"),
    (["--dataset-grid"], "--dataset-grid: not used without --torch-device"),
])
def test_the_dataset_grid_only_with_a_full_torch_run(run, tmp_path, args, named):
    one_line_error(run("calibrate", *args, "--out", str(tmp_path / "o")), named)
    assert not (tmp_path / "o").exists()
