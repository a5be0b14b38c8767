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
    assert device.engine.device_scales == ()  # the device is its own class: no class factors to fit
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


def _fake_device(monkeypatch, peak_flops_per_s, bandwidth_bytes_per_s, noise=lambda i: 1.0, distinct=2):
    """torch_bench's timings replaced (test_torch_bench times real forwards): the measured peak and
    bandwidth, and each forward at half of them plus 0.1 ms, times noise(i) (i: the forward's place in
    the grid); returns the grids benchmark was asked for."""
    from dfvg_dse.reference import torch_bench
    from dfvg_dse.validation.torch_calibration import roofline_seconds

    asked = []

    def fake_benchmark(model, device, dtype, tokens, contexts, batches, layers, repeats, seed, warmup):
        asked.append((tokens, contexts, batches))
        points = [(n, c, b) for n in tokens for c in contexts for b in batches]
        return [{"tokens": n, "context": c, "batch": b, "layers": distinct, "depth": model.n_layers,
                 "seconds": noise(i) * (1e-4 + 2 * roofline_seconds(model, {"tokens": (n,), "contexts": (c,),
                                                                            "batches": (b,)},
                                                                   peak_flops_per_s, bandwidth_bytes_per_s, 1))}
                for i, (n, c, b) in enumerate(points)]

    monkeypatch.setattr(torch_bench, "peak_matmul_flops_per_s", lambda *a, **k: peak_flops_per_s)
    monkeypatch.setattr(torch_bench, "copy_bandwidth_bytes_per_s", lambda *a, **k: bandwidth_bytes_per_s)
    monkeypatch.setattr(torch_bench, "benchmark", fake_benchmark)
    return asked


def test_the_dataset_grid_times_only_what_adopt_keeps(run, tmp_path, monkeypatch):
    # the GPU loan's re-measurement (benchmarks/gpu_recalibrate.sh): only the 24 forwards `engines adopt` keeps;
    # the timing itself is replaced here (test_torch_bench times real forwards), what is asked and written is checked
    import itertools

    from dfvg_dse.catalog import Catalog
    from dfvg_dse.validation.torch_calibration import DATASET_GRID

    asked = _fake_device(monkeypatch, 1e12, 1e11, distinct=1)
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


@pytest.mark.parametrize("high, severity, exit_code", [(1.8, "warning", 0), (10.0, "suspect", 1)])
def test_a_long_run_is_announced_and_a_scattered_fit_is_judged_as_calibrate_judges_a_core(
        run, tmp_path, monkeypatch, high, severity, exit_code):
    # a slow device (1 GFLOP/s, 1 GB/s as measured) and timings that alternate between 1 and `high` times their price, as
    # on a busy machine: a warning before the forwards; the fit's rms past 25% a warning, past 50% suspect
    # (exit 1, the profile marked SUSPECT); the files are written either way
    from dfvg_dse.catalog import Catalog

    _fake_device(monkeypatch, 1e9, 1e9, lambda i: high if i % 2 else 1.0)
    out = tmp_path / "o"
    result = run("calibrate", "--torch-device", "cpu", "--model", "llama-68m", "--quick", "--dtype", "float32",
                 "--out", str(out), "--json")
    assert result.exit_code == exit_code, result.output
    record = json.loads(result.stdout)
    assert record["warnings"][0].startswith("calibrate --torch-device cpu: llama-68m's forwards take at least")
    assert "a smaller --model, or a GPU is shorter" in record["warnings"][0]  # --quick given already
    assert any(f"torch-local-cpu: rms relative error" in w for w in record["warnings"][1:])
    assert bool(record["suspect"]) == (severity == "suspect")
    profile = Catalog.open(hwdb_dir=out / "hwdb").engine("torch-local-cpu")
    assert ("SUSPECT: " if severity == "suspect" else "WARNING: ") + "torch-local-cpu: rms" in profile.source


def test_the_roofline_floor_of_a_run_is_its_forwards_at_the_measured_rates():
    # independent of forward_work: a decode step of llama-3.1-8b reads its weights once (2 bytes each) and a
    # 64-token prefill does 2 FLOPs per parameter per token, at 1e12 FLOP/s and 1e9 B/s the weights win
    from dfvg_dse.catalog import Catalog
    from dfvg_dse.costs.work import param_counts
    from dfvg_dse.validation.torch_calibration import roofline_seconds

    model = Catalog.open().model("llama-3.1-8b").with_dtypes("bfloat16", "bfloat16")
    weights = param_counts(model).read_per_forward  # every layer and the LM head; the embedding is gathered
    one = roofline_seconds(model, {"tokens": (1,), "contexts": (0,), "batches": (1,)}, 1e12, 1e9, calls=1)
    assert one == pytest.approx(2 * weights / 1e9, rel=0.02)
    compute = roofline_seconds(model, {"tokens": (4096,), "contexts": (0,), "batches": (1,)}, 1e12, 1e12, calls=3)
    assert compute == pytest.approx(3 * 2 * weights * 4096 / 1e12, rel=0.15)  # + attention's FLOPs at 4096 tokens
