"""`serve-sim`: one design (and its baselines) served under load, at one rate or along a sweep."""

from __future__ import annotations

import dataclasses
import math

import click

from dfvg_dse.cli._base import (SEED, FiniteFloatRange, catalog_of, cli, emit_json, emit_table, emit_warnings,
                                engine_option, progress_line)
from dfvg_dse.cli._design import build_design, design_options
from dfvg_dse.files import check_plot_path, write_plot
from dfvg_dse.report.plots import plot_serving
from dfvg_dse.report.serving import SERVING_HEADER, crossover_text, crossovers, serving_record, serving_rows
from dfvg_dse.serving import check_iterations, check_request_count, design_costs, draw_requests, serve
from dfvg_dse.specs import InputError, SystemSpec
from dfvg_dse.specs.serving import LoadSpec, engine_batching

MAX_RATES = 64
DEFAULT_WORKLOAD = "sharegpt-vllm"


def _rates(text: str) -> list[float]:
    """'2' or '0.5,1,2,4' -> ascending request rates per second."""
    try:
        if "_" in text:  # float() reads 1_0 as 10
            raise ValueError
        rates = [float(part) for part in text.split(",")]
    except ValueError:
        raise InputError(f"--rate {text!r}: expected requests per second, one or a comma-separated list: 2 or "
                         "0.5,1,2,4") from None
    if not rates or len(rates) > MAX_RATES or any(not (math.isfinite(r) and 0 < r <= 1e6) for r in rates):
        raise InputError(f"--rate {text!r}: 1 to {MAX_RATES} rates, each in (0, 1e6] requests per second")
    if rates != sorted(set(rates)):
        raise InputError(f"--rate {text!r}: give the rates in ascending order, each once")
    return rates


def _baselines(config, which: str) -> dict:
    """The designs a speculative one is compared with: autoregressive decoding on the verifier, and the
    same drafter and tree co-located on the verifier (sequential) when the design splits devices."""
    if config.schedule == "ar" or which == "none":
        return {}
    verify = config.system.verify
    out = {}
    if which in ("ar", "both"):
        out["ar"] = dataclasses.replace(config, system=SystemSpec(verify, verify), draft=None, acceptance=None,
                                        tree=None, dynamic=None, schedule="ar", gpu_fill=False, name="ar")
    if which in ("colocated", "both") and config.system.draft.name != verify.name:
        out["colocated"] = dataclasses.replace(config, system=SystemSpec(verify, verify), schedule="sequential",
                                               gpu_fill=False, name="colocated")
    return out


@cli.command("serve-sim")
@engine_option
@design_options(with_batch_context=False)
@click.option("--workload", default=DEFAULT_WORKLOAD, show_default=True,
              help="Request lengths: a name of models/workloads/ (sharegpt-vllm, azure-conv-2023, "
                   "mooncake-conversation), a TOML summary, or a CSV trace (prompt_tokens,output_tokens[,arrival_s]).")
@click.option("--rate", "rate_text", help="Poisson arrivals, requests/s: one rate, or an ascending list for a sweep "
                                          "(0.5,1,2,4) [required unless the CSV trace has arrival_s].")
@click.option("--duration", type=FiniteFloatRange(0, 86400, min_open=True), default=60.0, show_default=True,
              help="Seconds of arrivals; every request is then served to its last token.")
@click.option("--max-batch", type=click.IntRange(1, 4096),
              help="Sequences decoding or prefilling at once [default: vLLM 0.33's max_num_seqs on the verifier: "
                   "256 below 70 GiB and on A100s, else 1024].")
@click.option("--chunk-tokens", type=click.IntRange(0, 10**6),
              help="Chunked prefill: tokens per forward [default: vLLM 0.33's online budget on the verifier: 2,048 "
                   "below 70 GiB and on A100s, 8,192 to 160 GiB, 16,384 above]; 0: prompts prefill alone.")
@click.option("--speculate-max-batch", type=click.IntRange(0, 4096), default=0, show_default=True,
              help="Decode autoregressively above this batch (engines' cutoff); 0: speculate at any feasible batch.")
@click.option("--kv-fraction", type=FiniteFloatRange(0, 1, min_open=True), default=0.9, show_default=True,
              help="Share of the verifier's memory for weights and KV cache (vLLM's gpu_memory_utilization).")
@click.option("--slo-ttft", type=FiniteFloatRange(0, 1e7, min_open=True), help="Goodput's TTFT target, ms.")
@click.option("--slo-tpot", type=FiniteFloatRange(0, 1e7, min_open=True), help="Goodput's TPOT target, ms.")
@click.option("--baseline", type=click.Choice(["both", "ar", "colocated", "none"]), default="both", show_default=True,
              help="Also serve AR on the verifier and/or the drafter co-located on it.")
@click.option("--plot", "plot_path", help="Latency against load, one line per design (.png or .svg).")
@click.option("--rounds", type=click.IntRange(100, 10**6), default=20000, show_default=True,
              help="Monte Carlo rounds of a dynamic rule's shape.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def serve_sim_cmd(ctx, workload, rate_text, duration, max_batch, chunk_tokens, speculate_max_batch, kv_fraction,
                  slo_ttft, slo_tpot, baseline, plot_path, rounds, seed, as_json, **design):
    """Serve a design under load: Poisson arrivals, continuous batching, prefill; TTFT, TPOT, goodput."""
    catalog = catalog_of(ctx)
    load_shape = catalog.workload(workload)
    if rate_text is None and not load_shape.arrivals_s:
        raise InputError("--rate is required (requests/s), unless --workload is a CSV trace with arrival_s")
    if rate_text is not None and load_shape.arrivals_s:
        raise InputError(f"--rate {rate_text}: the trace {workload} gives each request's arrival_s; drop --rate")
    plot = check_plot_path(plot_path) if plot_path else None
    if load_shape.arrivals_s:  # the trace's own arrivals: its span is the window (a burst at 0: one second)
        span = load_shape.arrivals_s[-1] or 1.0
        rates, duration = [len(load_shape.arrivals_s) / span], span
    else:
        rates = _rates(rate_text)
    prompt, output = load_shape.prompt.expected(), load_shape.output.expected()
    config = build_design(ctx, rounds=rounds, batch=1, context=int(round(prompt + output / 2)), **design)
    designs = {"design": dataclasses.replace(config, name="design"), **_baselines(config, baseline)}
    batching = engine_batching(config.system.verify, kv_fraction, speculate_max_batch, max_batch, chunk_tokens)
    slo = (slo_ttft * 1e-3 if slo_ttft else math.inf, slo_tpot * 1e-3 if slo_tpot else math.inf)
    loads = [LoadSpec(rate, duration, *slo, seed=seed) for rate in rates]
    for load in loads:  # every rate's work bounded before any is done
        check_request_count(load)
        check_iterations(draw_requests(load_shape, load), batching)
    records, warnings = [], []
    progress = progress_line("serve-sim", as_json)
    with progress:
        for i, (name, cfg) in enumerate(designs.items()):
            progress(i + 1, len(designs), f"{name}: {len(rates)} rate(s)")
            costs = design_costs(cfg, load_shape, batching, seed)
            warnings += [f"{name}: {w}" for w in costs.warnings]
            for load in loads:
                records.append(serving_record(name, load.rate_per_s,
                                              serve(cfg, costs, load_shape, load, batching).metrics))
    with_slos = bool(slo_ttft or slo_tpot)
    summary = crossovers(records, "design", [n for n in designs if n != "design"], with_slos) if len(rates) > 1 else []
    document = {"workload": {"name": load_shape.name, "source": load_shape.source, "mean_prompt_tokens": prompt,
                             "mean_output_tokens": output},
                "batching": dataclasses.asdict(batching), "slo_ttft_s": slo[0] if slo_ttft else None,
                "slo_tpot_s": slo[1] if slo_tpot else None, "duration_s": duration, "seed": seed,
                "designs": {n: {"schedule": c.schedule, "draft_device": c.system.draft.name,
                                "verify_device": c.system.verify.name} for n, c in designs.items()},
                "runs": records, "crossovers": summary, "warnings": warnings}
    if plot is not None:
        write_plot(plot, lambda tmp: plot_serving(records, tmp, f"{config.target.name} on {config.system.verify.name}, "
                                                  f"{load_shape.name}", *slo[::-1]))
        document["plot"] = str(plot)
    if as_json:
        emit_json(document)
        return
    emit_warnings(warnings)
    click.echo(f"workload {load_shape.name}: prompts {prompt:.0f}, outputs {output:.0f} tokens on average; "
               f"{duration:g} s of arrivals, max batch {batching.max_batch}, "
               + (f"chunked prefill {batching.chunk_tokens} tokens" if batching.chunk_tokens else "prefill alone"))
    emit_table(serving_rows(records), SERVING_HEADER)
    for c in summary:
        click.echo(crossover_text(c, with_slos))
    if plot is not None:
        click.echo(f"plot: {plot}")


