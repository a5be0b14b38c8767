"""Calibration of a user's own device with torch (issue 14, deliver 6; docs/engines.md).

`calibrate --torch-device DEV --model M` microbenchmarks M's real layer shapes with random weights
on DEV (reference/torch_bench.py): a square matmul and a copy for the device's peak and bandwidth,
then forwards over a grid of new tokens, contexts and batch sizes. Each forward becomes a
measurement row (phase "forward"), and an engine profile is fitted to the rows
(validation/engines.py) — the device's own kernels, priced by the same model as the published
engines. The caller writes the device entry, the profile and the rows as hwdb files.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, NamedTuple

import numpy as np

from dfvg_dse.costs.work import forward_work
from dfvg_dse.specs import DeviceSpec, InputError, ModelSpec
from dfvg_dse.specs.engines import EngineProfile
from dfvg_dse.specs.measurements import ForwardMeasurement, MeasurementSource
from dfvg_dse.validation.calibrate import FitIssue, rms_issues
from dfvg_dse.validation.engines import features, fit_engines

ENGINE = "torch"
GRID = {"tokens": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), "contexts": (0, 512, 2048), "batches": (1, 4, 16)}
QUICK_GRID = {"tokens": (1, 4, 16, 64), "contexts": (0, 256), "batches": (1, 2)}
# Distinct decoder layers (weights and caches) a whole-model forward cycles through, full grid and --quick
# (torch_bench.distinct_layers raises them until their weights outgrow the device's cache). Each forward
# runs all n_layers and is timed whole: the 2026-12-04 H200 rows were 2 layers timed and scaled by
# n_layers / 2, which multiplied a timing's jitter by 16 (32 layers) to 40 (80 layers) and scattered rows
# of the same shapes up to 1.6x (docs/engines.md)
LAYERS = 8
QUICK_LAYERS = 2
WARMUP = 2  # untimed calls before each forward's timings
LONG_RUN_S = 60.0  # a run whose forwards alone take longer is announced before they start
# The forwards of a run that join the shipped dataset (`engines adopt`): a grid fixed before any fit, so that
# one device's 99 forwards a model do not outweigh the published sources (docs/engines.md, 2026-12-04)
DATASET_GRID = {"tokens": (1, 4, 16, 64, 256, 1024), "contexts": (0, 2048), "batches": (1, 4)}


def grid_of(quick: bool, dataset_only: bool = False) -> dict:
    """The forwards a run times: QUICK_GRID (--quick), DATASET_GRID (--dataset-grid: only those `engines
    adopt` keeps) or the full GRID."""
    return QUICK_GRID if quick else DATASET_GRID if dataset_only else GRID


class Measured(NamedTuple):
    """What the microbenchmarks measured on the device."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    records: list[dict]  # reference/torch_bench.benchmark's records


class TorchCalibration(NamedTuple):
    source: MeasurementSource
    profile: EngineProfile
    in_sample_errors: np.ndarray  # predicted / measured - 1, per row


def timings(quick: bool) -> tuple[int, int]:
    """(repeats, warm-up calls) of each forward."""
    return (3 if quick else 5), WARMUP


def grid_points(grid: dict) -> list[tuple[int, int, int]]:
    """The (n, c, b) forwards of a grid, tokens x contexts x batches."""
    return list(itertools.product(grid["tokens"], grid["contexts"], grid["batches"]))


def roofline_seconds(model: ModelSpec, grid: dict, peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                     calls: int) -> float:
    """A floor on the forwards' time: each of the grid's forwards `calls` times at the slower of its
    FLOPs at the measured peak and its bytes at the measured bandwidth (an eager host adds to it)."""
    work = forward_work(model, *(np.array(axis) for axis in zip(*grid_points(grid))))
    return calls * float(np.maximum(work.flops / peak_flops_per_s, work.bytes / bandwidth_bytes_per_s).sum())


def measure(model: ModelSpec, device: str, dtype: str, quick: bool, seed: int,
            progress: Callable[[str], None] = lambda _: None, dataset_only: bool = False,
            notice: Callable[[float], None] = lambda _: None) -> Measured:
    """Run the microbenchmarks (torch needed: pip install '.[hf]') over grid_of's forwards; `notice`
    hears roofline_seconds' floor on the forwards' time before they start."""
    from dfvg_dse.reference import torch_bench

    grid = grid_of(quick, dataset_only)
    repeats, warmup = timings(quick)
    progress("peak and bandwidth")
    peak = torch_bench.peak_matmul_flops_per_s(device, dtype)
    bandwidth = torch_bench.copy_bandwidth_bytes_per_s(device)
    notice(roofline_seconds(model, grid, peak, bandwidth, repeats + warmup))
    progress("whole-model forwards")
    records = torch_bench.benchmark(model, device, dtype, list(grid["tokens"]), list(grid["contexts"]),
                                    list(grid["batches"]), layers=QUICK_LAYERS if quick else LAYERS,
                                    repeats=repeats, seed=seed, warmup=warmup)
    return Measured(peak, bandwidth, records)


def method_text(measured: Measured, model_name: str) -> str:
    """How a run timed the model, for its files' titles: whole forwards, the layers' weights it cycled."""
    r = measured.records[0]
    distinct = f"{r['layers']} distinct layer{'s' if r['layers'] != 1 else ''}"
    return (f"whole-model forwards of {model_name}: {r['depth']} decoder layers cycling through the random weights "
            f"of {distinct}, and the LM head")


def rows(measured: Measured, model_name: str, device_name: str, dtype: str, source_id: str) -> list[ForwardMeasurement]:
    return [ForwardMeasurement(source_id, f"n={r['tokens']}, c={r['context']}, b={r['batch']}", ENGINE, device_name,
                               model_name, dtype, r["batch"], "forward", r["context"], r["tokens"], "ms",
                               r["seconds"] * 1e3, kv_dtype=dtype if dtype != "float32" else "float16")
            for r in measured.records]


def fit_device(measurement_rows: list[ForwardMeasurement], model: ModelSpec, device: DeviceSpec, profile_name: str,
               source_text: str) -> tuple[EngineProfile, np.ndarray]:
    """An engine profile fitted to the device's own rows, and its in-sample errors."""
    f = features(measurement_rows, {measurement_rows[0].model: model}, {device.name: device})
    fitted = fit_engines(f)
    profile = fitted.profile(ENGINE, source_text)
    profile = dataclasses.replace(profile, name=profile_name)
    return profile, fitted.predict(f) / f.measured_s - 1.0


def fit_issues(profile_name: str, errors: np.ndarray) -> list[FitIssue]:
    """The device's own fit judged as calibrate judges a core's (validation/calibrate.rms_issues): its
    in-sample rms relative error past 25% is a warning, past 50% suspect. A busy machine scatters the
    timings of the same shapes; the fit then describes none of them."""
    return rms_issues(profile_name, float(np.sqrt(np.mean(np.square(errors)))))


def dataset_rows(measured_rows: list[ForwardMeasurement], device_name: str,
                 source_id: str) -> list[ForwardMeasurement]:
    """The rows of a calibrate run on DATASET_GRID, on the hwdb GPU `device_name`, in source `source_id`."""
    return [dataclasses.replace(r, source=source_id, device=device_name) for r in measured_rows
            if r.generated_tokens in DATASET_GRID["tokens"] and r.prompt_tokens in DATASET_GRID["contexts"]
            and r.batch in DATASET_GRID["batches"]]


def _grid_text() -> str:
    return ", ".join(f"{k} {'/'.join(map(str, v))}" for k, v in DATASET_GRID.items())


def _check_run(run: MeasurementSource) -> None:
    """A calibrate --torch-device run on one GPU, of one model, or InputError naming what is not."""
    where = run.path or run.id
    if run.kind != "forward" or run.engine != ENGINE:
        raise InputError(f"{where}: publication kind '{run.kind}', engine '{run.engine}'; adopt takes a calibrate "
                         f"--torch-device run (kind 'forward', engine '{ENGINE}')")
    for field, allowed in (("phase", lambda v: v == "forward"), ("device", lambda v: v.startswith("local-cuda"))):
        values = sorted({getattr(r, field) for r in run.rows})
        if len(values) != 1 or not allowed(values[0]):
            raise InputError(f"{where}: rows' {field} {', '.join(map(repr, values))}; adopt takes a calibrate "
                             "--torch-device cuda:N run: phase 'forward', one device named local-cudaN")
    models = sorted({r.model for r in run.rows})
    if len(models) != 1:
        raise InputError(f"{where}: rows of {len(models)} models ({', '.join(models)}); a calibrate run times one")


def adopted_source(run: MeasurementSource, device: DeviceSpec, note: str = "") -> tuple[MeasurementSource, str]:
    """A calibrate --torch-device run's forwards on DATASET_GRID as a dataset source on the catalog's GPU
    `device`, and its notes (docs/engines.md, "Your own device"); InputError for a run that is not one
    GPU's run of one model over the full grid or --dataset-grid (a --quick run lacks most of the dataset grid)."""
    _check_run(run)
    model = run.rows[0].model
    source_id = f"torch-{device.name}-calibrate-{model.replace('.', '-')}"
    rows = dataset_rows(list(run.rows), device.name, source_id)
    missing = sorted(set(grid_points(DATASET_GRID)) - {(r.generated_tokens, r.prompt_tokens, r.batch) for r in rows})
    if missing:
        shown = ", ".join(f"n={n} c={c} b={b}" for n, c, b in missing[:2]) + (" ..." if len(missing) > 2 else "")
        raise InputError(f"{run.path or run.id}: {len(missing)} forwards of the dataset grid missing ({shown}); "
                         "adopt takes a full-grid or --dataset-grid run (calibrate without --quick)")
    display = device.display_name or device.name
    notes = (f"Random weights with {model}'s real shapes, timed by `dfvg-dse calibrate --torch-device` "
             f"(dfvg_dse/reference/torch_bench.py: {run.title}; median of the repeats after warm-up, the device "
             f"synchronised). Rows kept: "
             f"the grid {_grid_text()}, fixed before any fit, {len(rows)} of the {len(run.rows)} the run timed; the "
             f"run's device '{run.rows[0].device}' is the catalog's '{device.name}'." + (f" {note}" if note else ""))
    source = MeasurementSource(source_id, "forward", f"{run.title} on one {display} (this project's own measurement)",
                               f"local: measured by this project on one {display} ({device.name}): "
                               f"{run.url.removeprefix('local: ')}", run.engine, run.engine_version, run.published,
                               tuple(rows))
    return source, notes
