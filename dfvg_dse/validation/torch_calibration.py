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

from dfvg_dse.specs import DeviceSpec, InputError, ModelSpec
from dfvg_dse.specs.engines import EngineProfile
from dfvg_dse.specs.measurements import ForwardMeasurement, MeasurementSource
from dfvg_dse.validation.engines import features, fit_engines

ENGINE = "torch"
GRID = {"tokens": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), "contexts": (0, 512, 2048), "batches": (1, 4, 16)}
QUICK_GRID = {"tokens": (1, 4, 16, 64), "contexts": (0, 256), "batches": (1, 2)}
# Decoder layers timed per forward (the model's time is n_layers x one layer + the LM head), full grid and
# --quick. One layer's time is (stack - head) / layers, so a timing's jitter reaches the model's forward
# n_layers / layers times: the 2026-12-04 H200 rows, timed over 2 layers, scattered up to 1.6x at n <= 64
# (jitter x 16 for a 32-layer model, x 40 for 80 layers); over 8 layers it is x 4 and x 10.
LAYERS = 8
QUICK_LAYERS = 2
# The forwards of a run that join the shipped dataset (`engines adopt`): a grid fixed before any fit, so that
# one device's 99 forwards a model do not outweigh the published sources (docs/engines.md, 2026-12-04)
DATASET_GRID = {"tokens": (1, 4, 16, 64, 256, 1024), "contexts": (0, 2048), "batches": (1, 4)}


def layers_timed(quick: bool) -> int:
    return QUICK_LAYERS if quick else LAYERS


class Measured(NamedTuple):
    """What the microbenchmarks measured on the device."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    records: list[dict]  # reference/torch_bench.benchmark's records


class TorchCalibration(NamedTuple):
    source: MeasurementSource
    profile: EngineProfile
    in_sample_errors: np.ndarray  # predicted / measured - 1, per row


def measure(model: ModelSpec, device: str, dtype: str, quick: bool, seed: int,
            progress: Callable[[str], None] = lambda _: None) -> Measured:
    """Run the microbenchmarks (torch needed: pip install '.[hf]')."""
    from dfvg_dse.reference import torch_bench

    grid = QUICK_GRID if quick else GRID
    progress("peak and bandwidth")
    peak = torch_bench.peak_matmul_flops_per_s(device, dtype)
    bandwidth = torch_bench.copy_bandwidth_bytes_per_s(device)
    progress("layer forwards")
    records = torch_bench.benchmark(model, device, dtype, list(grid["tokens"]), list(grid["contexts"]),
                                    list(grid["batches"]), layers=layers_timed(quick), repeats=3 if quick else 5,
                                    seed=seed)
    return Measured(peak, bandwidth, records)


def model_seconds(record: dict, model: ModelSpec) -> float:
    """The whole model's forward from one layer's time and the head's."""
    return model.n_layers * record["seconds_per_layer"] + record["seconds_head"]


def rows(measured: Measured, model: ModelSpec, model_name: str, device_name: str, dtype: str,
         source_id: str) -> list[ForwardMeasurement]:
    return [ForwardMeasurement(source_id, f"n={r['tokens']}, c={r['context']}, b={r['batch']}", ENGINE, device_name,
                               model_name, dtype, r["batch"], "forward", r["context"], r["tokens"], "ms",
                               model_seconds(r, model) * 1e3, kv_dtype=dtype if dtype != "float32" else "float16")
            for r in measured.records]


def fit_device(measurement_rows: list[ForwardMeasurement], model: ModelSpec, device: DeviceSpec, profile_name: str,
               source_text: str) -> tuple[EngineProfile, np.ndarray]:
    """An engine profile fitted to the device's own rows, and its in-sample errors."""
    f = features(measurement_rows, {measurement_rows[0].model: model}, {device.name: device})
    fitted = fit_engines(f)
    profile = fitted.profile(ENGINE, source_text)
    profile = dataclasses.replace(profile, name=profile_name)
    return profile, fitted.predict(f) / f.measured_s - 1.0


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
    GPU's full-grid run of one model (a --quick run lacks most of the grid)."""
    _check_run(run)
    model = run.rows[0].model
    source_id = f"torch-{device.name}-calibrate-{model.replace('.', '-')}"
    rows = dataset_rows(list(run.rows), device.name, source_id)
    missing = sorted(set(itertools.product(*DATASET_GRID.values()))
                     - {(r.generated_tokens, r.prompt_tokens, r.batch) for r in rows})
    if missing:
        shown = ", ".join(f"n={n} c={c} b={b}" for n, c, b in missing[:2]) + (" ..." if len(missing) > 2 else "")
        raise InputError(f"{run.path or run.id}: {len(missing)} forwards of the dataset grid missing ({shown}); "
                         "adopt takes a full-grid run (calibrate without --quick)")
    display = device.display_name or device.name
    notes = (f"Random weights with {model}'s real shapes, timed by `dfvg-dse calibrate --torch-device` "
             f"(dfvg_dse/reference/torch_bench.py: decoder layers and the LM head, median of the repeats after "
             f"warm-up, the device synchronised; the model's forward = n_layers x one layer + the head). Rows kept: "
             f"the grid {_grid_text()}, fixed before any fit, {len(rows)} of the {len(run.rows)} the run timed; the "
             f"run's device '{run.rows[0].device}' is the catalog's '{device.name}'." + (f" {note}" if note else ""))
    source = MeasurementSource(source_id, "forward", f"{run.title} on one {display} (this project's own measurement)",
                               f"local: measured by this project on one {display} ({device.name}): "
                               f"{run.url.removeprefix('local: ')}", run.engine, run.engine_version, run.published,
                               tuple(rows))
    return source, notes
