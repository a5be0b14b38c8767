"""Commands that join the analytical model and the reference decoder (issue 7): calibrate, validate."""

from __future__ import annotations

import dataclasses
import platform
import time
from pathlib import Path

import click

from dfvg_dse.catalog.hwdocs import core_document, link_document
from dfvg_dse.catalog.lookup import write_toml_atomic
from dfvg_dse.cli._base import (FiniteFloatRange, catalog_of, cli, emit_issues, emit_json, emit_table, issue_marks,
                                progress_line, refuse_unused)
from dfvg_dse.cli.reference import _load_pair, backend_options
from dfvg_dse.specs import InputError
from dfvg_dse.specs.backend import pair_label, stage_backends
from dfvg_dse.catalog.profiles import profile_document, trace_lines
from dfvg_dse.export import write_json, write_jsonl, write_markdown_table, write_plot, write_records
from dfvg_dse.files import check_output_folder
from dfvg_dse.report.plots import plot_validation
from dfvg_dse.validation.fidelity import (FORWARD_MEDIAN_BUDGET, FORWARD_P90_BUDGET,
                                          SERVING_MEDIAN_BUDGET, SET_ASIDE_MEDIAN_BUDGET, SPECULATIVE_MEDIAN_BUDGET,
                                          Budgets)
from dfvg_dse.validation.compare import SAMPLED_TEMPERATURE, Parts, cases, summary
from dfvg_dse.validation.run import NEW_TOKENS, Calibration, calibrate, validate

TABLE = [("config", "configuration", ""), ("measured_tokens_per_round", "tokens/round measured", ".3f"),
         ("predicted_tokens_per_round", "predicted", ".3f"), ("error_tokens_per_round", "error", "+.1%"),
         ("error_tokens_per_round_iid", "error, i.i.d. rounds", "+.1%"),
         ("error_tokens_per_round_bursty", "error, two-state", "+.1%"),
         ("measured_draft_s", "draft s measured", ".5f"), ("predicted_draft_s", "predicted", ".5f"),
         ("measured_verify_s", "verify s measured", ".5f"), ("predicted_verify_s", "predicted", ".5f"),
         ("measured_tokens_per_s", "tokens/s measured", ".0f"), ("predicted_tokens_per_s", "predicted", ".0f"),
         ("error_tokens_per_s", "error", "+.1%"), ("measured_link_bytes", "link B/round measured", ".0f"),
         ("predicted_link_bytes", "predicted", ".0f")]


def _prompts(ctx, text, split: str, count: int) -> list[tuple[int, ...]]:
    return [tuple(text.encode(p["text"])) for p in catalog_of(ctx).read_reference_prompts(None, split)[:count]]


PAIRS = ("builtin:tiny", "builtin:small")  # the shipped trained pairs (models/reference/)


def _pair_option(command):
    return click.option("--target", "pair", type=click.Choice(PAIRS), default="builtin:tiny", show_default=True,
                        help="The shipped pair decoded (builtin:small: sized for --backend torch --dtype bfloat16, "
                             "where speculation pays; docs/validation.md).")(command)


def _calibrate(ctx, quick: bool, count: int, progress, pair: str = "builtin:tiny", backends=None):
    """Load the pair on its backends (numpy float32 unless `backends` = (target's, draft's)) and calibrate."""
    target, draft, text = _load_pair(ctx, pair, None, *(backends or ()))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    specs = {"target": target.config.spec, "draft": draft.config.spec}
    dtypes = (backends[0].dtype, backends[1].dtype) if backends else ("float32", "float32")
    result = calibrate(target, draft, specs, _prompts(ctx, text, "calibration", count), quick, stamp, progress, *dtypes)
    label = pair_label(*backends) if backends else "numpy float32"
    result = dataclasses.replace(result, setup=f"{pair}, {label}")
    return target, draft, text, specs, result, stamp


def _issue_records(issues) -> list[dict]:
    return [{"fit": i.fit, "parameter": i.parameter, "value": i.value, "bound": i.bound, "severity": i.severity,
             "message": i.message} for i in issues]


def _write_calibration(out: Path, result: Calibration, stamp: str) -> list[Path]:
    written = []
    for core, fit, peak_source in ((0, result.target_fit, result.peak_sources[0]),
                                   (1, result.draft_fit, result.peak_sources[1])):
        note = (f"{stamp} on {platform.node() or 'this machine'}, {'target forwards' if core == 0 else 'draft rounds'}; "
                f"rms relative error {fit.rms_relative_error:.1%}, max {fit.max_relative_error:.1%} "
                f"over {len(fit.residuals)} shapes{issue_marks(fit.issues)}")
        document = core_document(fit.device, result.clock_hz, peak_source, note,
                                 platform.processor() or "local CPU")
        path = out / "hwdb" / "cpu" / f"local-core-{core}.toml"
        write_toml_atomic(path, document)
        written.append(path)
    link_fit = f"{stamp}; rms relative error {result.link.rms_relative_error:.1%}{issue_marks(result.link.issues)}"
    path = out / "hwdb" / "link" / "local-pipe.toml"
    write_toml_atomic(path, link_document(result.link.link, link_fit))
    written.append(path)
    for profile, stem, temperature in ((result.greedy_profile, "reference-greedy", 0.0),
                                       (result.sampled_profile, "reference-sampled", SAMPLED_TEMPERATURE)):
        written += _write_profile(out / "acceptance", stem, profile, temperature)
    written.append(write_json(out / "calibration.json", {
        "stamp": stamp, "setup": result.setup,
        "verify_core": {"residuals": result.target_fit.residuals, "rms_relative_error": result.target_fit.rms_relative_error},
        "draft_core": {"residuals": result.draft_fit.residuals, "rms_relative_error": result.draft_fit.rms_relative_error},
        "link": {"residuals": result.link.residuals, "rms_relative_error": result.link.rms_relative_error},
        "greedy_profile": list(result.greedy_profile.rank_probs),
        "sampled_profile": list(result.sampled_profile.rank_probs),
        "suspect": any(i.suspect for i in result.issues), "warnings": [i.message for i in result.issues],
        "issues": _issue_records(result.issues)}))
    return written


def _write_profile(folder: Path, stem: str, profile, temperature: float) -> list[Path]:
    """An acceptance profile file (`--acceptance FILE` anywhere) and, beside it, its
    teacher-forced trace, which estimates replay for static trees and ADAPT."""
    meta = {"target": "builtin:tiny target", "draft": "builtin:tiny draft", "workload": "reference calibration prompts",
            "temperature": temperature, "tag": "measured"}
    document = profile_document(profile, meta)
    written = []
    if profile.trace is not None:
        written.append(write_jsonl(folder / f"{stem}.trace.jsonl", trace_lines(profile.trace)))
        document["trace"] = {"file": f"{stem}.trace.jsonl", "run_tokens": profile.trace.run_tokens}
    path = folder / f"{stem}.toml"
    write_toml_atomic(path, document)
    return written + [path]


def _core_record(fit, drafts: bool) -> dict:
    device = fit.device
    return {"eta_compute": device.eta_compute, "bandwidth_gb_s": device.main_memory.bandwidth_bytes_per_s / 1e9,
            "forward_overhead_us": device.forward_overhead_s * 1e6, "layer_overhead_us": device.layer_overhead_s * 1e6,
            "multi_row_bandwidth": device.multi_row_bandwidth_fraction, "overlap": device.compute_memory_overlap,
            "linear_row_ratios": list(device.linear_row_ratios),
            # each core's own fixed work per round: drafting on the draft core, verification on the verify core
            "draft_round_overhead_us": device.draft_round_overhead_s * 1e6 if drafts else None,
            "verify_round_overhead_us": None if drafts else device.verify_round_overhead_s * 1e6,
            "rms_error": fit.rms_relative_error, "max_error": fit.max_relative_error}


def _calibration_record(result: Calibration) -> dict:
    link = result.link.link
    return {"setup": result.setup,
            "verify_core": _core_record(result.target_fit, False), "draft_core": _core_record(result.draft_fit, True),
            "link_latency_us": link.latency_s * 1e6, "link_bandwidth_gb_s": link.bandwidth_bytes_per_s / 1e9,
            "link_message_overhead_us": link.software_overhead_s * 1e6,
            "link_rms_error": result.link.rms_relative_error,
            "sampling_extra_us": {"per_draft_level": result.sampled_extra_s[0] * 1e6,
                                  "per_verified_token": result.sampled_extra_s[1] * 1e6}, "greedy_p": list(result.greedy_profile.rank_probs[:4]),
            "sampled_p": list(result.sampled_profile.rank_probs[:4]),
            "suspect": [i.message for i in result.issues if i.suspect], "warnings": [i.message for i in result.issues]}


@cli.command("calibrate")
@click.option("--quick", is_flag=True, help="Fewer pipe repeats (CI); with --torch-device, a smaller grid.")
@click.option("--count", type=click.IntRange(1, 32), default=8, show_default=True, help="Calibration prompts traced.")
@click.option("--torch-device", help="Instead: time --model's whole forwards with torch on this device (cuda:0, "
                                     "cpu) and fit its hwdb entry and engine profile (docs/engines.md).")
@click.option("--model", "model_name", default="llama-3.1-8b", show_default=True, help="--torch-device: the model.")
@click.option("--dataset-grid", is_flag=True, help="--torch-device: time only the 24 of the 99 forwards `engines adopt` keeps "
                                                    "(n 1-1024 by 4x, c 0/2048, b 1/4): a tenth to a quarter of the time.")
@click.option("--dtype", type=click.Choice(["bfloat16", "float16", "float32"]), default="bfloat16", show_default=True,
              help="Weights and activations: --torch-device's, or --backend torch's (bfloat16, float32).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="results/calibration", show_default=True)
@_pair_option
@click.option("--backend", type=click.Choice(["numpy", "torch"]), default="numpy", show_default=True,
              help="Engine of the decoded pair's forwards (torch: with --dtype bfloat16 or float32; the stages "
                   "run on this machine's CPU).")
@click.option("--draft-backend", type=click.Choice(["numpy", "torch"]), help="The draft's engine [default: --backend].")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def calibrate_cmd(ctx, quick, count, torch_device, model_name, dataset_grid, dtype, out_dir, pair, backend, draft_backend,
                  as_json):
    """Fit the cost model to this machine: a core per stage, the pipe between them, and acceptance.

    About 1 minute on a 2-core machine with the default 8 prompts (progress on a terminal's
    stderr). A value at a bound of its range, or a fit with a large rms error, is a warning; a
    suspect fit (docs/validation.md) exits 1, its files written and marked SUSPECT."""
    check_output_folder(out_dir, "--out")  # before a minute of decoding, not after it
    if torch_device is not None:
        from dfvg_dse.cli.engines import torch_calibrate

        refuse_unused(ctx, ["pair", "backend", "draft_backend"], "with --torch-device (it microbenchmarks --model's "
                      "layers; without it, calibrate decodes the --target pair on --backend)")
        if quick:
            refuse_unused(ctx, ["dataset_grid"], "with --quick (its own small grid)")
        return torch_calibrate(ctx, torch_device, model_name, dtype, quick, Path(out_dir), as_json, dataset_grid)
    refuse_unused(ctx, ["model_name", "dataset_grid"], "without --torch-device (the decoded pair is --target's)")
    if backend == "numpy" and draft_backend != "torch":
        refuse_unused(ctx, ["dtype"], "with the numpy backend (float32); add --backend torch")
    backends = stage_backends(backend, dtype if backend == "torch" or draft_backend == "torch" else "float32", "cpu",
                              draft_backend)
    with progress_line("calibrate", as_json) as progress:
        *_, result, stamp = _calibrate(ctx, quick, count, progress, pair, backends)
    written = _write_calibration(Path(out_dir), result, stamp)
    record = {**_calibration_record(result), "written": [str(p) for p in written]}
    if as_json:
        emit_json(record)
    else:
        rows = [[stage, f"{c['eta_compute']:.3f}", f"{c['bandwidth_gb_s']:.1f}", f"{c['forward_overhead_us']:.1f}",
                 f"{c['layer_overhead_us']:.1f}", f"{c['multi_row_bandwidth']:.3f}", f"{c['overlap']:.2f}",
                 f"{c['verify_round_overhead_us'] if stage == 'verify core' else c['draft_round_overhead_us']:.1f}",
                 f"{c['rms_error']:.1%}"]
                for stage, c in (("verify core", record["verify_core"]), ("draft core", record["draft_core"]))]
        emit_table(rows, ["stage", "eta_compute", "bandwidth GB/s", "forward us", "layer us", "multi-row bw",
                          "overlap", "round us", "rms error"])
        click.echo(f"pipe: {record['link_latency_us']:.1f} us + bytes / {record['link_bandwidth_gb_s']:.2f} GB/s, "
                   f"{record['link_message_overhead_us']:.0f} us of software per message "
                   f"(rms {record['link_rms_error']:.1%})")
        click.echo(f"acceptance: greedy p = {[round(p, 3) for p in record['greedy_p']]}, "
                   f"T=0.8 p = {[round(p, 3) for p in record['sampled_p']]}")
        click.echo(f"wrote {', '.join(record['written'])} (use --hwdb-dir {Path(out_dir) / 'hwdb'})")
        emit_issues(result.issues)
    if record["suspect"]:
        if not as_json:
            click.echo(f"calibration suspect: {len(record['suspect'])} fit(s) above; the files are marked SUSPECT",
                       err=True)
        ctx.exit(1)


@cli.command("validate")
@click.option("--quick", is_flag=True, help="AR and chains 2 and 4 only, 3 calibration prompts (CI).")
@click.option("--count", type=click.IntRange(1, 32), default=8, show_default=True, help="Held-out prompts.")
@click.option("--anchors", "with_anchors", is_flag=True,
              help="Instead: published GPU measurements against the fitted engine profiles (docs/engines.md).")
@click.option("--median-budget", type=FiniteFloatRange(0, 10), default=FORWARD_MEDIAN_BUDGET, show_default=True,
              help="--anchors: leave-one-source-out median |error| allowed per forward category.")
@click.option("--p90-budget", type=FiniteFloatRange(0, 10), default=FORWARD_P90_BUDGET, show_default=True,
              help="--anchors: 90th percentile |error| allowed over all forward rows.")
@click.option("--speculative-budget", type=FiniteFloatRange(0, 10), default=SPECULATIVE_MEDIAN_BUDGET,
              show_default=True, help="--anchors: median |error| allowed on published speculative speedups.")
@click.option("--set-aside-budget", type=FiniteFloatRange(0, 10), default=SET_ASIDE_MEDIAN_BUDGET,
              show_default=True, help="--anchors: median |error| allowed on the rows never fitted (multi-GPU, MoE).")
@click.option("--serving-budget", type=FiniteFloatRange(0, 10), default=SERVING_MEDIAN_BUDGET, show_default=True,
              help="--anchors: median |error| allowed on published speedups of speculation under load.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="results/validation", show_default=True)
@_pair_option
@backend_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def validate_cmd(ctx, quick, count, with_anchors, median_budget, p90_budget, speculative_budget, set_aside_budget,
                 serving_budget, out_dir, pair, backend, dtype, torch_device, draft_backend, as_json):
    """Calibrate, then run the reference decoder on held-out prompts and compare with the model's
    predictions; exit code 1 when the error budget is broken.

    About 1 minute on a 2-core machine, --quick a little less (measured: 65 s and 62 s; up to about
    3 minutes when other work shares the cores), progress on a terminal's stderr. A prediction built on a
    suspect fit (docs/validation.md: rms error past 50%, the pipe's latency or bandwidth clamped
    into its range even on a second measurement, a per-message overhead at 0) does not pass: each
    suspect fit is one line naming the parameter, its value and the bound, and the exit code is 1."""
    check_output_folder(out_dir, "--out")  # before a minute of decoding, not after it
    if with_anchors:  # published measurements against the fitted engine profiles (seconds, no decoding)
        from dfvg_dse.cli.engines import anchors_report

        return anchors_report(ctx, Path(out_dir), as_json, Budgets(median_budget, p90_budget, speculative_budget,
                                                                      set_aside_budget, serving_budget))
    backends = stage_backends(backend, dtype, torch_device, draft_backend)
    if torch_device != "cpu":  # TODO(issue 19): the stages' device model of a GPU (its calibrated peak and bandwidth)
        raise InputError(f"--torch-device {torch_device}: validate calibrates the stages as this machine's CPU cores; "
                         "on a GPU run `reference bench --torch-device` instead")
    with progress_line("validate: calibration", as_json) as progress:
        target, draft, text, specs, calibration, stamp = _calibrate(ctx, quick, 3 if quick else 8, progress, pair,
                                                                    backends)
    out = Path(out_dir)
    written = _write_calibration(out / "calibration", calibration, stamp)
    prompts = _prompts(ctx, text, "held-out", count)
    context = int(sum(len(p) for p in prompts) / len(prompts) + NEW_TOKENS / 2)
    parts = Parts(specs["target"], specs["draft"], calibration.target_fit.device, calibration.draft_fit.device,
                  calibration.link.link, calibration.greedy_profile, calibration.sampled_profile, context,
                  calibration.sampled_extra_s)
    with progress_line("validate", as_json) as progress:
        rows, window = validate(target, draft, parts, cases(quick), prompts, calibration, stamp, progress)
    issues = calibration.issues + window.issues
    result = summary(rows, issues)
    written += write_records(out / "validation.csv", rows)
    # the fits' issues head the report, below its title (write_markdown_table has no other place)
    title = f"Validation, {stamp}, {calibration.setup}" + "".join(
        f"\n\n{'**suspect**' if i.suspect else 'warning'}: {i.message}" for i in issues)
    written.append(write_markdown_table(out / "validation.md", rows, TABLE, title))
    written.append(write_plot(out / "validation.png",
                              lambda tmp: plot_validation(rows, tmp, "dfvg-dse validate: predicted vs measured")))
    anchors: list[dict] = []  # published measurements: `validate --anchors` (cli/engines.py)
    document = {"configs": rows, **result, "calibration": _calibration_record(calibration),
                "window": {"verify_core": _core_record(window.target_fit, False),
                           "draft_core": _core_record(window.draft_fit, True),
                           "link_message_overhead_us": window.link.link.software_overhead_s * 1e6},
                "issues": _issue_records(issues),
                "anchors": anchors,
                "written": [str(p) for p in written]}
    if as_json:
        emit_json(document)
    else:
        emit_table([[r["config"], f"{r['measured_tokens_per_round']:.3f}", f"{r['predicted_tokens_per_round']:.3f}",
                     f"{r['error_tokens_per_round']:+.1%}", f"{r['measured_tokens_per_s']:.0f}",
                     f"{r['predicted_tokens_per_s']:.0f}", f"{r['error_tokens_per_s']:+.1%}"] for r in rows],
                   ["config", "tok/round", "predicted", "error", "tok/s", "predicted", "error"])
        for row in anchors:
            click.echo(f"{row['anchor']}: predicted {row['predicted']:.2f} {row['quantity']}, published "
                       f"{row['published']:.2f} ({row['error']:+.1%}, tolerance {row['tolerance']:.0%})")
        static = [r for r in rows if r.get("error_tokens_per_round_iid") is not None]
        if static:
            click.echo("tokens/round from summary statistics instead of the replayed trace (i.i.d. rounds / "
                       "two-state model): " + ", ".join(f"{r['config']} {r['error_tokens_per_round_iid']:+.1%} / "
                                                        f"{r['error_tokens_per_round_bursty']:+.1%}" for r in static))
        click.echo(f"wrote {out}/validation.csv, validation.md, validation.png"
                   + (", anchors.csv" if anchors else "") + f" and the calibration under {out}/calibration")
        emit_issues(issues)
        verdict = "passed" if result["passed"] else "FAILED"
        if result["calibration_suspect"]:
            verdict += f" (calibration suspect: {len(result['suspect'])} fit(s) above)"
        elif result["warnings"]:
            verdict += f" (with {len(result['warnings'])} calibration warning(s) above)"
        click.echo(f"tokens/s MAPE {result['mape_tokens_per_s']:.1%} (budget {result['tokens_per_s_mape_budget']:.0%}); "
                   f"worst tokens/round error {result['max_error_tokens_per_round']:.1%} "
                   f"(budget {result['tokens_per_round_budget']:.0%}): {verdict}")
    if not result["passed"]:
        ctx.exit(1)


