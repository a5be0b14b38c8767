"""Commands on whole designs: estimate, compare (scenarios, ablation, the DFVG paper preset), sensitivity."""

from __future__ import annotations

import dataclasses
import math

import click

from dfvg_dse.acceptance import acceptance_warnings, can_replay
from dfvg_dse.files import check_plot_path, write_plot
from dfvg_dse.cli._design import KIND_WORDS, build_design, design_options, draft_model_of
from dfvg_dse.cli._base import (engine_option, SEED, catalog_of, cli, emit_json, emit_table,
                                emit_warnings, given_options, parallel_options, progress_line, refuse_unused)
from dfvg_dse.pipeline import estimate
from dfvg_dse.pipeline.presets import PRESETS
from dfvg_dse.pipeline.scenarios import Setup, compare
from dfvg_dse.pipeline.sensitivity import VARIES, sweep
from dfvg_dse.report import estimate_record, simulation_record
from dfvg_dse.report.plots import plot_compare, plot_sweep
from dfvg_dse.sim import simulate
from dfvg_dse.specs import InputError


@cli.command("estimate")
@engine_option
@design_options()
@click.option("--simulate", "run_sim", is_flag=True,
              help="Also run the discrete-event simulator: about 1 s for a static tree, 7 s for a dynamic rule at "
                   "20,000 rounds, up to 40 s at its round limit on a 2-core machine (progress on a terminal).")
@click.option("--rounds", type=click.IntRange(100, 10**6), default=20000, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def estimate_cmd(ctx, run_sim, rounds, seed, as_json, **design):
    """Tokens/s, J/token and stage breakdown of one design (tree or dynamic rule, placement, schedule)."""
    config = build_design(ctx, rounds=rounds, **design)
    batch = config.batch
    progress = progress_line("estimate", as_json)  # phases only: the library calls take no callback
    with progress:
        progress(1, 2 if run_sim else 1, "the closed form" + (f" ({rounds:,} rounds)" if config.dynamic else ""))
        result = estimate(config, rounds=rounds, seed=seed)
    record = estimate_record(result)
    replayed = config.schedule != "ar" and can_replay(config.tree if config.tree is not None else config.dynamic,
                                                      config.acceptance.trace)
    record["acceptance_model"] = "trace replay" if replayed else "profile statistics"
    record["warnings"] += [] if config.schedule == "ar" else acceptance_warnings(config.acceptance, config.tree)
    if config.tree is not None:
        record["tree"] = {"parents": list(config.tree.parents), "ranks": list(config.tree.ranks)}
    if config.dynamic is not None:
        record["dynamic"] = {"rule": type(config.dynamic).__name__, **dataclasses.asdict(config.dynamic)}
    if run_sim and result.feasible:
        with progress:
            progress(2, 2, f"simulating {rounds:,} rounds")
            record["simulate"] = simulation_record(simulate(config, rounds, seed + 1), result.tokens_per_s)
    if as_json:
        emit_json(record)
        return
    emit_warnings(record["warnings"])
    if not result.feasible:
        click.echo(f"infeasible: {result.reason}")
        return
    per_sequence = f" = {record['tokens_per_s'] / batch:.1f} per sequence x {batch}" if batch > 1 else ""
    click.echo(f"{record['tokens_per_s']:.1f} tokens/s{per_sequence} ({record['speedup_vs_ar']:.2f}x AR's "
               f"{record['ar_tokens_per_s']:.1f}), {record['j_per_token']:.3f} J/token "
               f"({record['energy_efficiency_vs_ar']:.2f}x AR's tokens/J; {record['energy_efficiency_vs_ar_2dev']:.2f}x "
               f"against an AR baseline on two such GPUs, as in the DFVG paper)"
               + (f", ${record['usd_per_mtoken']:.3f} per million tokens" if record.get("usd_per_mtoken") is not None
                  else ""))
    click.echo(f"round {record['round_time_s'] * 1e3:.3f} ms, {record['expected_tokens_per_round']:.3f} tokens per "
               f"round per sequence, {record['draft_nodes_per_round']:.1f} draft tokens, widths "
               f"{[round(w, 2) for w in record['level_widths']]}")
    if replayed:
        trace = config.acceptance.trace
        click.echo(f"acceptance: replayed from the profile's trace ({len(trace.ranks or trace.accept_probs)} runs of "
                   f"{trace.run_tokens} tokens), not its summary statistics")
    emit_table([[stage, s["device"], f"{s['time_s'] * 1e3:.3f}", s["bound"], f"{s['busy_fraction']:.2f}"]
                for stage, s in record["stages"].items()], ["stage", "device", "time (ms)", "bound", "busy"])
    if record["link"]:
        link = record["link"]
        click.echo(f"link {link['name']}: {link['down_bytes']:.0f} B down, {link['up_bytes']:.0f} B up, "
                   f"{link['time_s'] * 1e6:.1f} us ({link['bound']}-bound), {100 * link['share_of_round']:.2f}% of the round")
    if "simulate" in record:
        s = record["simulate"]
        click.echo(f"simulated: {s['tokens_per_s']:.1f} tokens/s ({100 * s['relative_error_tokens_per_s']:+.2f}% vs "
                   f"closed form), time per token p50 {s['p50_time_per_token_s'] * 1e3:.2f} ms, p99 "
                   f"{s['p99_time_per_token_s'] * 1e3:.2f} ms, wasted draft {100 * s['wasted_draft_fraction']:.1f}%")


COMPARE_ROUNDS = 5000  # Monte Carlo rounds of compare's dynamic trees (and of validate --anchors' DFVG rows)


def _setup(ctx, target, draft, gpu, fpga, cpu, second_gpu, fpga_link, cpu_link, gpu_link, acceptance_spec, batch,
           context, target_dtype=None, draft_dtype=None, catalog=None) -> Setup:
    catalog = catalog or catalog_of(ctx)
    target_model = catalog.model(target)
    target_model = target_model.served_in(None, target_dtype) if target_dtype else target_model
    devices = {k: catalog.device(v) for k, v in (("gpu", gpu), ("fpga", fpga), ("cpu", cpu))}
    for kind, device in devices.items():
        if device.kind != kind:
            raise InputError(f"--{kind} {device.name}: {KIND_WORDS[device.kind]}, not {KIND_WORDS[kind]} "
                             f"(see 'dfvg-dse hw list --kind {kind}')")
    second = catalog.device(second_gpu) if second_gpu else None
    if second is not None and second.kind != "gpu":
        raise InputError(f"--second-gpu {second.name}: {KIND_WORDS[second.kind]}, not a GPU "
                         "(see 'dfvg-dse hw list --kind gpu')")
    links = {k: catalog.link(v or devices[d].host_link) for k, v, d in (("fpga", fpga_link, "fpga"),
                                                                           ("cpu", cpu_link, "cpu"),
                                                                           ("gpu", gpu_link, "gpu"))}
    return Setup(target_model, draft_model_of(catalog, draft, draft_dtype, target_model),
                 catalog.acceptance(acceptance_spec) if acceptance_spec else catalog.pair_profile(
                     target, draft, "" if "pair" not in ctx.params else
                     "choose a --pair that has one (see 'dfvg-dse acceptance list') or pass --acceptance SPEC"),
                 devices["gpu"], devices["fpga"],
                 devices["cpu"], links["fpga"], links["cpu"], links["gpu"],
                 second, batch, context,
                 catalog.defaults().sync_per_round_s)


def preset_setup(ctx, preset: dict, target: str, draft: str, catalog=None) -> Setup:
    """One pair of a preset (PRESETS) in the preset's devices, links, batch, context and dtypes (GPUs
    priced by `catalog`'s engine; default the command's)."""
    return _setup(ctx, target, draft, preset["gpu"], preset["fpga"], preset["cpu"], None, preset["fpga_link"],
                  preset["cpu_link"], preset["gpu_link"], None, preset["batch"], preset["context"],
                  preset["target_dtype"], preset["draft_dtype"], catalog)


def _usd(row: dict) -> str:
    """$ per million tokens, or '-' where a device of the scenario has no price (not rented)."""
    return "-" if row.get("usd_per_mtoken") is None else f"{row['usd_per_mtoken']:.3f}"


def _print_compare(title: str, rows: list[dict]) -> None:
    emit_warnings(w for r in rows for w in r.get("warnings", ()))
    click.echo(title)
    emit_table([[r["name"], f"{r['tokens_per_s']:.1f}", f"{r['speedup_vs_ar']:.2f}", f"{r['j_per_token']:.3f}",
                 f"{r['energy_efficiency_vs_ar']:.2f}", f"{r['energy_efficiency_vs_ar_2dev']:.2f}",
                 f"{r['expected_tokens_per_round']:.2f}",
                 f"{100 * r['link']['share_of_round']:.2f}%" if r.get("link") else "-", _usd(r)] if r["feasible"]
                else [r["name"], "infeasible: " + r["reason"], "", "", "", "", "", "", ""] for r in rows],
               ["scenario", "tokens/s", "speedup", "J/token", "tokens/J x", "vs 2 AR devices x", "tokens/round",
                "link share", "$/Mtoken"])


@cli.command("compare")
@engine_option
@click.option("--preset", type=click.Choice(sorted(PRESETS)),
              help="A published setting (dfvg-paper: all its pairs; about 15 s on a 2-core machine, progress on "
                   "a terminal).")
@click.option("--target", help="Target model [required without --preset].")
@click.option("--draft", help="Draft model [required without --preset].")
@click.option("--gpu", default="rtx-4090", show_default=True, help="The verifier GPU (and the GPU-only scenarios').")
@parallel_options("verify", "--gpu")
@click.option("--fpga", default="v80", show_default=True)
@click.option("--cpu", default="xeon-silver-4310", show_default=True, help="The host CPU (duodecoding, dovetail).")
@click.option("--second-gpu", help="amusd's drafting GPU [default: another --gpu].")
@click.option("--fpga-link", help="[default: the FPGA's host link]")
@click.option("--cpu-link", help="[default: the CPU's host link]")
@click.option("--gpu-link", help="Between the two GPUs [default: the GPU's host link].")
@click.option("--acceptance", "acceptance_spec", help="Acceptance SPEC [default: pair:TARGET/DRAFT].")
@click.option("--batch", type=click.IntRange(1, 4096), default=1, show_default=True)
@click.option("--context", type=click.IntRange(0, 10**7), default=512, show_default=True)
@click.option("--rounds", type=click.IntRange(100, 10**6), default=COMPARE_ROUNDS, show_default=True,
              help="Monte Carlo rounds for dynamic trees.")
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a bar chart (PNG/SVG/PDF by extension).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def compare_cmd(ctx, preset, target, draft, gpu, verify_tp, verify_pp, verify_ep, fpga, cpu, second_gpu, fpga_link, cpu_link, gpu_link,
                acceptance_spec, batch, context, rounds, plot, as_json):
    """Every scenario side by side (ar, sps, specinfer, duodecoding, dovetail, amusd, dfvg) and DFVG's ablation."""
    path_of_plot = check_plot_path(plot) if plot else None  # before the work, not after it
    if preset:
        refuse_unused(ctx, ["target", "draft", "gpu", "verify_tp", "verify_pp", "verify_ep", "fpga", "cpu", "second_gpu", "fpga_link",
                            "cpu_link", "gpu_link", "acceptance_spec", "batch", "context"],
                      f"with --preset {preset} (the preset fixes its pairs, devices, links, batch and context)")
        p = PRESETS[preset]
        runs = []
        progress = progress_line("compare", as_json)  # closed below; an error clears it first (_Group.main)
        for index, (tgt, drf) in enumerate(p["pairs"], 1):
            progress(index, len(p["pairs"]), f"{tgt} / {drf}")
            setup = preset_setup(ctx, p, tgt, drf)
            rows = [estimate_record(e) for e in compare(setup, rounds).values()]
            note = ""
            if not rows[0]["feasible"]:  # the target does not fit in fp16: show it with 8-bit weights too
                setup = dataclasses.replace(setup, target=setup.target.with_dtypes("int8", "float16"))
                rows = [estimate_record(e) for e in compare(setup, rounds).values()]
                note = "target in fp16 does not fit the GPU; shown with int8 weights"
            runs.append({"target": tgt, "draft": drf, "note": note, "scenarios": rows})
        progress.close()
        document = {"preset": preset, "setting": {k: v for k, v in p.items() if k != "paper"}, "paper": p["paper"],
                    "runs": runs}
        if plot:
            _plot_preset(runs, path_of_plot)
        if as_json:
            emit_json(document)
            return
        for run in runs:
            _print_compare(f"\n{run['target']} / {run['draft']} on {p['gpu']} + {p['fpga']}"
                           + (f" ({run['note']})" if run["note"] else ""), run["scenarios"])
        paper = p["paper"]
        click.echo("\nhw-branch .. +overlap rebuild DFVG's ablation; its last step is the full dfvg design")
        click.echo(f"paper ({paper['source']}): speedup {paper['speedup_range'][0]}-{paper['speedup_range'][1]}x, "
                   f"energy efficiency {paper['energy_efficiency_range'][0]}-{paper['energy_efficiency_range'][1]}x "
                   f"(baselines on two GPUs), ablation {paper['ablation']}, communication "
                   f"{100 * paper['communication_share_range'][0]:.2f}-{100 * paper['communication_share_range'][1]:.1f}%")
        return
    if not (target and draft):
        raise InputError("--target and --draft are required without --preset")
    gpu = catalog_of(ctx).device(gpu, verify_tp, verify_pp, verify_ep, degrees_given=bool(
        given_options(ctx, ["verify_tp", "verify_pp", "verify_ep"]))).name
    setup = _setup(ctx, target, draft, gpu, fpga, cpu, second_gpu, fpga_link, cpu_link, gpu_link, acceptance_spec,
                   batch, context)
    rows = [estimate_record(e) for e in compare(setup, rounds).values()]
    if plot:
        title = f"{target} / {draft}: {gpu} + {fpga}, batch {batch}, context {context}"
        write_plot(path_of_plot, lambda tmp: plot_compare(rows, tmp, title))
    if as_json:
        emit_json({"target": target, "draft": draft, "scenarios": rows})
        return
    _print_compare(f"{target} / {draft} on {gpu} (+ {fpga}, {cpu})", rows)


def _plot_preset(runs: list[dict], base) -> None:
    for run in runs:
        out = base.with_name(f"{base.stem}-{run['target']}{base.suffix}") if len(runs) > 1 else base
        title = f"DFVG paper setting: {run['target']} / {run['draft']}" + (f" ({run['note']})" if run["note"] else "")
        write_plot(out, lambda tmp, run=run, title=title: plot_compare(run["scenarios"], tmp, title))


_VALUE_RANGES = {"link-latency": (0.0, 1e7, "give latencies in us, 0 to 1e7"),
                 "acceptance": (1e-6, 1.0 - 1e-6, "give top-1 acceptances strictly between 0 and 1"),
                 "batch": (1, 4096, "give batch sizes 1 to 4096")}


@cli.command("sensitivity")
@engine_option
@click.option("--vary", type=click.Choice(VARIES), required=True)
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default="dfvg-paper", show_default=True)
@click.option("--pair", default="qwen3-8b/qwen3-0.6b", show_default=True, help="Target/draft of the preset to vary.")
@click.option("--values", help="Comma-separated values [default: a range suited to --vary].")
@click.option("--gpu", help="Verifier GPU [default: the preset's].")
@parallel_options("verify", "--gpu")
@click.option("--fpga", help="The FPGA drafter, or FPGAs side by side: 2xv80 [default: the preset's].")
@click.option("--acceptance", "acceptance_spec",
              help="Acceptance SPEC for every value [default: the pair's profile]; not with --vary acceptance.")
@click.option("--rounds", type=click.IntRange(100, 10**6), default=2000, show_default=True)
@click.option("--plot", type=click.Path(dir_okay=False), help="Write the plot (PNG/SVG/PDF by extension).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def sensitivity_cmd(ctx, vary, preset, pair, values, gpu, verify_tp, verify_pp, verify_ep, fpga, acceptance_spec, rounds,
                    plot, as_json):
    """Speedup of dfvg, amusd, specinfer and sps as one factor varies, and where the FPGA split stops paying."""
    path_of_plot = check_plot_path(plot) if plot else None  # before the work, not after it
    p = PRESETS[preset]
    target, _, draft = pair.partition("/")
    if not (target and draft) or "/" in draft:
        raise InputError(f"--pair {pair!r}: expected TARGET/DRAFT, e.g. qwen3-8b/qwen3-0.6b")
    gpu = catalog_of(ctx).device(gpu or p["gpu"], verify_tp, verify_pp, verify_ep, degrees_given=bool(
        given_options(ctx, ["verify_tp", "verify_pp", "verify_ep"]))).name
    if acceptance_spec and vary == "acceptance":
        raise InputError("--acceptance: --vary acceptance sweeps the acceptance itself; give --values instead")
    fpga = fpga or p["fpga"]
    setup = _setup(ctx, target, draft, gpu, fpga, p["cpu"], None, p["fpga_link"] if fpga == p["fpga"] else None,
                   p["cpu_link"], p["gpu_link"], acceptance_spec, p["batch"], p["context"], p["target_dtype"],
                   p["draft_dtype"])
    defaults = {"link-latency": "1,3,10,30,100,300,1000,3000", "acceptance": "0.5,0.6,0.7,0.75,0.8,0.85,0.9,0.95",
                "target": "llama-3.2-1b,qwen3-1.7b,qwen3-4b,qwen3-8b,qwen3-14b,qwen3-32b,llama-3.1-70b",
                "batch": "1,2,4,8,16,32,64"}
    raw = [v.strip() for v in (values or defaults[vary]).split(",")]
    models = None
    if vary == "target":
        if setup.draft.head_kind:  # a head reads its own target's hidden states: no other target
            raise InputError(f"--vary target: the draft '{setup.draft.name}' is a head ({setup.draft.head_kind}) of {setup.target.name}; "
                             "a head drafts only for its own target (vary batch, acceptance or link-latency)")
        catalog = catalog_of(ctx)
        models = {name: catalog.model(name).served_in(None, p["target_dtype"]) for name in raw}
        xs = raw
    else:
        try:
            xs = [float(v) if vary != "batch" else int(v) for v in raw]
        except ValueError:
            kind = "integers" if vary == "batch" else "numbers"
            raise InputError(f"--values {values!r}: expected {kind} for --vary {vary}") from None
        low, high, what = _VALUE_RANGES[vary]
        bad = [v for v in xs if not (math.isfinite(v) and low <= v <= high)]
        if bad:
            raise InputError(f"--values: {bad[0]:.6g} is out of range for --vary {vary}; {what}")
    result = sweep(setup, vary, xs, models, rounds)
    if plot:
        title = f"{pair} on {gpu} + {fpga}: speedup vs {result.x_label}"
        write_plot(path_of_plot, lambda tmp: plot_sweep(result, tmp, title))
    if as_json:
        emit_json(result._asdict())
        return
    emit_table([[str(x)] + [("-" if result.speedup[s][i] is None else f"{result.speedup[s][i]:.2f}") for s in result.speedup]
                for i, x in enumerate(result.x)], [result.x_label] + list(result.speedup))
    emit_warnings(result.warnings)
    for value, reason in result.infeasible.items():
        click.echo(f"{value}: infeasible: {reason}")
    click.echo(result.crossover)
