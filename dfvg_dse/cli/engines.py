"""Commands of serving-engine profiles (docs/engines.md): engines list/show/fit, and the report
of `validate --anchors` (published measurements against the fitted profiles)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import numpy as np

from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.engines import PER_HEAD, PER_HEAD_DEFAULT, engine_document
from dfvg_dse.catalog.lookup import DEFAULT_ENGINE, ROOFLINE, write_toml_atomic, write_toml_documents
from dfvg_dse.cli._base import catalog_of, cli, emit_issues, emit_json, emit_table, emit_warnings, issue_marks
from dfvg_dse.export import write_plot, write_records
from dfvg_dse.files import check_output_folder
from dfvg_dse.report.plots import plot_fidelity
from dfvg_dse.specs.engines import CLASSES
from dfvg_dse.specs.measurements import ENGINE_FAMILIES, ForwardMeasurement
from dfvg_dse.validation.engines import POOLED
from dfvg_dse.validation.fidelity import (Budgets, Inputs, fit, fitted_rows, forward_report, median_abs_error,
                                          set_aside_report, set_aside_summary, speculative_report, summary,
                                          time_per_token_summary, verdicts)
from dfvg_dse.validation.serving_anchors import serving_report

GENERIC = "generic"  # the file name of the pooled profile: an engine without rows of its own
DISPLAY = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang", "gpt-fast": "gpt-fast",
           "llama.cpp": "llama.cpp", "hf": "Hugging Face transformers", "torch": "PyTorch eager (no CUDA graphs)",
           GENERIC: "any engine (pooled fit)"}


def fit_inputs(catalog: Catalog) -> Inputs:
    """Every measurement file, the models and GPUs its rows name (plain roofline devices), and the
    engines whose shipped profiles say their 16-bit GEMMs accumulate in FP16 or issue only mma.sync."""
    plain = catalog.with_engine(ROOFLINE)
    sources = plain.measurements()
    rows = [r for s in sources for r in s.rows]
    models = {n for r in rows for n in ((r.model,) if isinstance(r, ForwardMeasurement) else (r.target, r.draft)) if n}
    accumulate = frozenset(name for name in plain.engine_names()[1:] if plain.engine(name).fp16_accumulate)
    mma_sync = frozenset(name for name in plain.engine_names()[1:] if plain.engine(name).mma_sync_only)
    per_head = frozenset((name, c) for name in plain.engine_names()[1:] for c in plain.engine(name).per_head_attention)
    specs = {n: plain.model(n) for n in sorted(models)}
    devices = {n: plain.device(n) for n in sorted({r.device for r in rows})}
    for row in fitted_rows(sources, specs)[1]:  # the groups of the multi-GPU rows, by name (4xa100-80gb)
        group = plain.device(row.device, tensor=row.tensor_parallel)
        devices[group.name] = group
    return Inputs(sources, specs, devices, accumulate, mma_sync, per_head)


def _fitted_note(inputs: Inputs, engine: str) -> tuple[dict, str]:
    rows, aside = fitted_rows(inputs.sources, inputs.models)
    mine = [r for r in rows if engine == POOLED or r.engine == engine]
    sources = sorted({r.source for r in mine})
    fitted = {"rows": len(mine), "rows_all_engines": len(rows), "rows_set_aside": len(aside),
              "sources": sources}
    if not mine:  # an engine priced by its kernel family's profile
        family = ENGINE_FAMILIES[engine]
        kin = sorted({r.engine for r in rows if ENGINE_FAMILIES.get(r.engine) == family})
        fitted["family"] = family
        text = (f"no rows of its own: the '{family}' kernel family's profile, fitted by `dfvg-dse engines fit` to "
                f"hwdb/measurements beside {', '.join(kin)} ({len(rows)} single-GPU rows in all); method docs/engines.md")
        return fitted, text
    text = (f"fitted by `dfvg-dse engines fit` to hwdb/measurements: {len(mine)} single-GPU rows of "
            f"{'every engine' if engine == POOLED else engine} ({len(sources)} source{'' if len(sources) == 1 else 's'}, each file's [publication] names "
            f"its URL and tables), {len(rows)} rows in all; method docs/engines.md")
    return fitted, text


@cli.group("engines")
def engines() -> None:
    """Serving-engine profiles: kernel efficiencies and overheads fitted to published measurements."""


@engines.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def engines_list(ctx, as_json):
    """List the engine profiles (`roofline` is the plain roofline of the hwdb entries)."""
    catalog = catalog_of(ctx)
    out = [{"name": ROOFLINE, "display_name": "plain roofline (hwdb efficiencies)", "rows": 0, "classes": []}]
    for name in catalog.engine_names()[1:]:
        profile, data = catalog.engine_entry(name)
        out.append({"name": name, "display_name": data.get("display_name", name),
                    "rows": data.get("fitted", {}).get("rows", 0), "classes": [k.weight_class for k in profile.kernels]})
    if as_json:
        emit_json({"engines": out})
    else:
        emit_table([[e["name"], e["display_name"], str(e["rows"]), ", ".join(e["classes"])] for e in out],
                   ["engine", "", "rows fitted", "weight classes"])


@engines.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def engines_show(ctx, name, as_json):
    """Show one engine profile: the sources it was fitted to and their engine versions, efficiencies per
    weight class, overheads, device-class factors."""
    catalog = catalog_of(ctx)
    profile, data = catalog.engine_entry(name)
    fitted_sources = data.get("fitted", {}).get("sources", [])
    versions = {s.id: s.engine_version for s in catalog.measurements() if s.id in fitted_sources}
    if as_json:
        emit_json({**data, "source_versions": versions})
        return
    click.echo(f"{name}: {data.get('display_name', name)}; {profile.source}")
    if versions:  # the releases a user's own deployment should be compared with
        emit_table([[source, versions[source]] for source in fitted_sources if source in versions],
                   ["fitted to source", "engine version (as the source states it)"])
    click.echo(f"overhead {profile.forward_overhead_s * 1e6:.1f} us per forward + {profile.layer_overhead_s * 1e6:.2f} us "
               f"per layer (overlapping the kernels at q = {profile.host_overlap:.2f}) + {profile.sequence_overhead_s * 1e6:.2f} us "
               "per sequence of the batch; small GEMMs at "
               f"M / (M + {profile.half_rows:.3g}) of the kernels' rate; transition sharpness p = {profile.sharpness:.2f}; "
               "attention at "
               f"{profile.attention_efficiency:.2f} of the GEMM rate; FP16 accumulate: {profile.fp16_accumulate}; "
               f"mma.sync only: {profile.mma_sync_only}; attention per query head for KV: "
               f"{', '.join(profile.per_head_attention) or 'none'}")
    emit_table([[k.weight_class, f"{k.bandwidth_efficiency:.3f}", f"{k.compute_efficiency:.3f}"] for k in profile.kernels],
               ["weights", "bandwidth eff.", "compute eff."])
    if profile.device_scales:
        emit_table([[n, f"{c:.3f}", f"{b:.3f}"] for n, c, b in profile.device_scales],
                   ["device class", "compute x", "bandwidth x"])


@engines.command("fit")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Write the profiles here [default: the first hwdb directory's engines/].")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def engines_fit(ctx, out_dir, as_json):
    """Fit every engine's profile to hwdb/measurements and write hwdb/engines/NAME.toml (seconds)."""
    catalog = catalog_of(ctx)
    folder = check_output_folder(out_dir or catalog.hwdb_dir / "engines", "--out")
    inputs = fit_inputs(catalog)
    fitted, _ = fit(inputs)
    written = []
    for engine in fitted.engines + fitted.borrowed() + (POOLED,):
        stem = GENERIC if engine == POOLED else engine
        note, text = _fitted_note(inputs, engine)
        old = catalog.engine_entry(stem)[1] if stem in catalog.engine_names() else {}
        fact = old.get("fp16_accumulate", {}).get("source", "default: 16-bit GEMMs accumulate in FP32 (cuBLAS's "
                                                  "default compute type)")
        mma_fact = old.get("mma_sync_only", {}).get("source", "default: the engine's GEMMs reach each GPU's full "
                                                    "tensor rate (cuBLAS / CUTLASS kernels for the architecture)")
        per_head_fact = old.get(PER_HEAD, {}).get("source", PER_HEAD_DEFAULT)
        per_head = tuple(c for c in CLASSES if (stem, c) in inputs.per_head_attention)
        profile = fitted.profile(engine, text, stem in inputs.fp16_accumulate, stem in inputs.mma_sync_only, per_head)
        profile = dataclasses.replace(profile, name=stem)
        path = Path(folder) / f"{stem}.toml"
        write_toml_atomic(path, engine_document(profile, DISPLAY.get(stem, stem), note, fact, mma_fact, per_head_fact))
        written.append(str(path))
    if as_json:
        emit_json({"written": written, "rows": fitted.rows, "engines": list(fitted.engines),
                   "borrowed": list(fitted.borrowed())})  # engines written from their family's profile
    else:
        click.echo(f"fitted {len(fitted.engines)} engines to {fitted.rows} rows; wrote " + ", ".join(written))


@engines.command("adopt")
@click.argument("rows_files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--device", "device_name", required=True,
              help="The catalog's GPU the rows were measured on (h200, h100-sxm ...): calibrate names it "
                   "local-cuda0.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder of measurement files to write to: the shipped hwdb/measurements, or your own "
                   "--hwdb-dir's measurements/.")
@click.option("--note", default="", help="Said in the files' notes: the GPU as nvidia-smi names it, its driver.")
@click.option("--replace", is_flag=True, help="Overwrite measurement files of the same ids (a re-measurement).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def engines_adopt(ctx, rows_files, device_name, out_dir, note, replace, as_json):
    """`calibrate --torch-device` runs' rows (one file a model, all on one GPU) as dataset sources: the
    forwards on a grid fixed before any fit (n 1-1024, c 0 and 2048, b 1 and 4), on a catalog GPU, as
    OUT/torch-GPU-calibrate-MODEL.toml. Every file is checked before any is written."""
    from dfvg_dse.catalog.measurements import measurement_document, read_measurements
    from dfvg_dse.specs import InputError
    from dfvg_dse.validation import torch_calibration as tc

    catalog = catalog_of(ctx)
    gpus = catalog.hw_names("gpu")
    if device_name not in gpus:
        raise InputError(f"--device {device_name!r}: allowed: a GPU of the catalog ({', '.join(gpus)})")
    planned: dict[Path, tuple] = {}  # target -> (its run file, source, document)
    for rows_file in rows_files:
        source, notes = tc.adopted_source(read_measurements(Path(rows_file)), catalog.device(device_name), note)
        document = measurement_document(source, notes)
        target = Path(out_dir) / f"{source.id}.toml"
        if target in planned:
            raise InputError(f"{rows_file}: the same model on the same GPU as {Path(planned[target][0]).name} "
                             f"(both would be {target.name}); adopt one run a model")
        catalog.check_measurements(target, document)  # as the catalog will read it, before anything is written
        if target.exists() and not replace:
            raise InputError(f"{target}: exists; --replace overwrites it (a re-measurement of the same GPU and model)")
        planned[target] = (rows_file, source, document)
    check_output_folder(out_dir, "--out")
    write_toml_documents((target, document) for target, (_, _, document) in planned.items())  # all or none
    adopted = [{"written": str(target), "rows": len(source.rows), "model": source.rows[0].model}
               for target, (_, source, _) in planned.items()]
    if as_json:
        emit_json({"device": device_name, "adopted": adopted})
    else:
        for a in adopted:
            click.echo(f"wrote {a['written']}: {a['rows']} forwards of {a['model']} on {device_name}")
        click.echo("refit with `dfvg-dse engines fit`")


def anchors_report(ctx, out: Path, as_json: bool, budgets: Budgets = Budgets()) -> None:
    """validate --anchors: every published row predicted (in-sample and leave-one-source-out), the
    speculative speedups predicted, a table per category and a log-log plot; exit 1 past a budget."""
    catalog = catalog_of(ctx)
    inputs = fit_inputs(catalog)
    records, fitted = forward_report(inputs)
    profiles = {e: catalog.engine(e) for e in catalog.engine_names()[1:]}
    profiles[POOLED] = profiles.get(GENERIC) or fitted.profile(POOLED, "in-memory pooled fit")
    speculative = speculative_report(inputs, profiles)
    aside = set_aside_report(inputs, profiles)
    workloads = {r.workload: catalog.workload(r.workload) for s in inputs.sources if s.kind == "serving" for r in s.rows}
    serving = serving_report(inputs, profiles, workloads)
    heterogeneous = _dfvg_paper(ctx)
    loso, inside = summary(records), summary(records, "error")
    broken = verdicts(records, speculative, budgets, aside, serving)
    written = write_records(out / "anchors.csv", records) + write_records(out / "anchors-summary.csv", loso)
    for name, extra in (("speculative", speculative), ("set-aside", aside), ("serving", serving),
                        ("heterogeneous", heterogeneous)):
        if extra:
            written += write_records(out / f"{name}.csv", extra)
    written.append(write_plot(out / "anchors.png", lambda tmp: plot_fidelity(
        records, tmp, f"{len(records)} published forwards, leave-one-source-out")))
    if as_json:
        emit_json({"forward": records, "summary": loso, "in_sample_summary": inside, "speculative": speculative,
                   "speculative_time_per_token": time_per_token_summary(speculative), "set_aside": aside,
                   "set_aside_summary": set_aside_summary(aside), "serving": serving, "heterogeneous": heterogeneous,
                   "broken": broken, "written": [str(p) for p in written]})
    else:
        emit_table([[a["category"], str(a["rows"]), f"{a['median_abs_error']:.1%}", f"{a['p90_abs_error']:.1%}",
                     f"{b['median_abs_error']:.1%}"] for a, b in zip(loso, inside)],
                   ["category", "rows", "LOSO median |err|", "LOSO p90", "in-sample median"])
        if speculative:
            emit_table([[r["source"], r["target"], r["draft"], r["device"], f"{r['mean_accepted_tokens']:.2f}",
                         f"{r['published_speedup']:.2f}", f"{r['predicted_speedup']:.2f}", f"{r['error']:+.1%}",
                         _ms_per_token(r)] for r in speculative],
                       ["source", "target", "drafter", "device", "tau", "published", "predicted", "error",
                        "ms/token published, predicted"])
            click.echo(f"speculative speedups, {len(speculative)} rows: median |error| "
                       f"{median_abs_error(speculative):.1%}")
            per_token = time_per_token_summary(speculative)
            if per_token:
                click.echo(f"time per token, the {per_token['rows']} rows that publish it: median |error| "
                           f"{per_token['median_abs_error']:.1%}, largest {per_token['max_abs_error']:.1%}")
        if aside:
            emit_table([[a["category"], str(a["rows"]), f"{a['median_abs_error']:.1%}", f"{a['p90_abs_error']:.1%}"]
                        for a in set_aside_summary(aside)],
                       ["set aside: multi-GPU, MoE (never fitted)", "rows", "median |err|", "p90"])
        if serving:
            emit_table([[r["source"], r["target"], r["draft"], r["device"], r["workload"], str(r["batch"]),
                         f"{r['mean_accepted_tokens']:.2f}", f"{r['published_speedup']:.2f}",
                         f"{r['predicted_speedup']:.2f}", f"{r['error']:+.1%}"] for r in serving],
                       ["serving under load", "target", "drafter", "device", "workload", "batch", "tau", "published",
                        "predicted", "error"])
        if heterogeneous:
            emit_table([_dfvg_row(r) for r in heterogeneous],
                       ["DFVG (ASPLOS 2026), not gated", "draft", "devices", "scenario", "p1", "tokens/round", "published",
                        "predicted", "error"])
        click.echo("wrote " + ", ".join(str(p) for p in written))
        for line in broken:
            click.echo(f"budget broken: {line}", err=True)
    if broken:
        ctx.exit(1)


def _dfvg_paper(ctx) -> list[dict]:
    """DFVG's published speedups against the heterogeneous pipeline in the paper's setting (the
    dfvg-paper preset; validation/dfvg_paper.py), its GPU priced as `compare --preset dfvg-paper`
    prices it: by the default engine's profile (the paper does not name its GPU runtime)."""
    from dfvg_dse.cli.pipeline import COMPARE_ROUNDS, preset_setup
    from dfvg_dse.pipeline.presets import PRESETS
    from dfvg_dse.validation.dfvg_paper import dfvg_paper_report, preset_checks

    preset = PRESETS["dfvg-paper"]
    drafts = dict(preset["pairs"])
    targets = dict.fromkeys(target for target, _, _ in preset_checks(preset["paper"]))
    catalog = catalog_of(ctx).with_engine(DEFAULT_ENGINE)
    return dfvg_paper_report({t: preset_setup(ctx, preset, t, drafts[t], catalog) for t in targets},
                             preset["paper"], COMPARE_ROUNDS)


def _dfvg_row(record: dict) -> list[str]:
    """One DFVG figure of the report's table: its prediction, or why the design has none."""
    head = [record["target"], record["draft"], f"{record['gpu']} + {record['fpga']}", record["scenario"],
            f"{record['first_rank_acceptance']:.2f}"]
    if record["predicted_speedup"] is None:
        return head + ["-", f"{record['published_speedup']:.2f}", "infeasible: " + record["infeasible"], "-"]
    return head + [f"{record['tokens_per_round']:.2f}", f"{record['published_speedup']:.2f}",
                   f"{record['predicted_speedup']:.2f}", f"{record['error']:+.1%}"]


def _ms_per_token(record: dict) -> str:
    """A speculative row's time per token: published and predicted (error), or the prediction alone."""
    predicted = f"{record['predicted_ms_per_token']:.2f}"
    if record["published_ms_per_token"] is None:
        return f"-, {predicted}"
    return f"{record['published_ms_per_token']:.2f}, {predicted} ({record['ms_per_token_error']:+.1%})"


def _local_name(device: str) -> str:
    """hwdb name of a torch device: cuda:0 -> local-cuda0, cpu -> local-cpu."""
    return "local-" + "".join(c for c in device.lower() if c.isalnum())


def _announce_long_run(device: str, model_name: str, seconds: float, quick: bool, announced: list[str]) -> None:
    """A warning before forwards that take more than LONG_RUN_S at the device's measured roofline,
    shown at once and kept in `announced` (the --json record's warnings)."""
    from dfvg_dse.validation import torch_calibration as tc

    if seconds > tc.LONG_RUN_S:
        shorter = ("a smaller --model" if quick else "--quick or a smaller --model") + (
            ", or a GPU" if device == "cpu" else "")
        announced.append(f"calibrate --torch-device {device}: {model_name}'s forwards take at least "
                         f"{seconds / 60:.1f} min here (the grid at this device's measured peak and bandwidth, "
                         f"before an eager host's time); {shorter} is shorter")
        emit_warnings(announced[-1:])


def torch_calibrate(ctx, device: str, model_name: str, dtype: str, quick: bool, out: Path, as_json: bool,
                    dataset_grid: bool = False) -> None:
    """calibrate --torch-device: the device's entry, its engine profile and its rows under OUT/hwdb."""
    import os
    import platform
    from datetime import datetime, timezone

    from dfvg_dse.catalog.hardware import parse_device
    from dfvg_dse.catalog.hwdocs import torch_device_document
    from dfvg_dse.catalog.engines import parse_engine
    from dfvg_dse.catalog.measurements import measurement_document, parse_measurements
    from dfvg_dse.cli._base import progress_line
    from dfvg_dse.specs import InputError
    from dfvg_dse.specs.measurements import MeasurementSource
    from dfvg_dse.validation import torch_calibration as tc

    if not device.startswith(("cuda", "cpu")):
        raise InputError(f"--torch-device {device!r}: allowed: cpu, cuda, cuda:N")
    try:
        import torch  # noqa: F401 (the optional extra)
    except ImportError:
        raise InputError("--torch-device needs torch: pip install 'dfvg-dse[hf]'") from None
    catalog = catalog_of(ctx).with_engine(ROOFLINE)
    model = catalog.model(model_name).with_dtypes(dtype, dtype if dtype != "float32" else "float16")
    name, kind = _local_name(device), "gpu" if device.startswith("cuda") else "cpu"
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    announced: list[str] = []
    with progress_line(f"calibrate --torch-device {device}", as_json) as progress:
        measured = tc.measure(model, device, dtype, quick, 0, lambda step: progress(0, 2, step), dataset_grid,
                              lambda seconds: _announce_long_run(device, model_name, seconds, quick, announced))
    import torch as _torch

    display = _torch.cuda.get_device_name(device) if kind == "gpu" else f"{platform.processor() or 'CPU'} (torch)"
    capacity = (_torch.cuda.get_device_properties(device).total_memory if kind == "gpu"
                else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    source = (f"dfvg-dse calibrate --torch-device {device} on {platform.node() or 'this machine'}, {stamp}: "
              f"median of square {dtype} matmuls and of tensor copies (torch {_torch.__version__})")
    profile_name = f"torch-{name}"
    hwdb = out / "hwdb"
    folder = hwdb / kind
    doc = torch_device_document(name, kind, display, measured.peak_flops_per_s, dtype, measured.bandwidth_bytes_per_s,
                                capacity, os.cpu_count() or 1, source)
    spec = parse_device(folder / f"{name}.toml", doc, kind, catalog.defaults()).spec
    source_id = f"{name}-{model_name.replace('.', '-')}"
    rows = tc.rows(measured, model_name, name, dtype, source_id)
    text = (f"fitted by `dfvg-dse calibrate --torch-device {device}` ({stamp}) to {len(rows)} forwards of "
            f"{model_name} ({dtype}; {tc.method_text(measured, model_name)}) on {display}")
    profile, errors = tc.fit_device(rows, model, spec, profile_name, text)
    issues = tc.fit_issues(profile_name, errors)
    profile = dataclasses.replace(profile, source=profile.source + issue_marks(issues))  # as calibrate marks a core
    documents = (
        (hwdb / "engines" / f"{profile_name}.toml",
         engine_document(profile, f"torch eager on {display}", {"rows": len(rows), "sources": [source_id]},
                         "default: torch's GEMMs accumulate in FP32")),
        (folder / f"{name}.toml", {**doc, "engine": profile_name}),
        (hwdb / "measurements" / f"{source_id}.toml",
         measurement_document(MeasurementSource(source_id, "forward", tc.method_text(measured, model_name),
                                                f"local: {source}", "torch", _torch.__version__, stamp[:7],
                                                tuple(rows)))))
    # every document is read back by the shipped readers before any is written: all or nothing
    parse_engine(documents[0][0], documents[0][1])
    parse_device(documents[1][0], documents[1][1], kind, catalog.defaults())
    parse_measurements(documents[2][0], documents[2][1])
    for path, _ in documents:
        check_output_folder(path.parent, "--out")
    write_toml_documents(documents)  # all or none
    written = [str(path) for path, _ in documents]
    check = Catalog.open(hwdb_dir=hwdb)  # and the catalog finds them
    check.device(name), check.measurements()
    record = {"device": name, "engine": profile_name, "rows": len(rows), "peak_flops_per_s": measured.peak_flops_per_s,
              "bandwidth_bytes_per_s": measured.bandwidth_bytes_per_s,
              "median_abs_error": float(np.median(np.abs(errors))), "p90_abs_error": float(np.percentile(np.abs(errors), 90)),
              "written": written, "suspect": [i.message for i in issues if i.suspect],
              "warnings": announced + [i.message for i in issues]}
    if as_json:
        emit_json(record)
    else:
        emit_issues(issues)
        click.echo(f"{name}: {measured.peak_flops_per_s / 1e12:.3g} TFLOP/s ({dtype} matmul), "
                   f"{measured.bandwidth_bytes_per_s / 1e9:.3g} GB/s (copy); profile {profile_name} fitted to "
                   f"{len(rows)} forwards, median |error| {record['median_abs_error']:.1%}, 90th percentile "
                   f"{record['p90_abs_error']:.1%}")
        click.echo(f"wrote {', '.join(written)}; use them with --hwdb-dir {hwdb} --device {name}")
    if record["suspect"]:
        if not as_json:
            click.echo(f"calibration suspect: the fit above; {profile_name} is marked SUSPECT", err=True)
        ctx.exit(1)
