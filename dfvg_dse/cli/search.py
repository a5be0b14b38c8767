"""Commands of the design-space search: search, sweep, pareto, export."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import click

from dfvg_dse import __version__, export
from dfvg_dse.catalog.studies import check_study
from dfvg_dse.cli._base import SEED, FiniteFloatRange, cli, emit_json, engine_option
from dfvg_dse.cli.space import DEFAULTS, search_request, search_space, serving_request, space_summary, unpriced_warnings
from dfvg_dse.pipeline.grid import FAMILIES, SCHEDULE_CHOICES, SearchSpace
from dfvg_dse.pipeline.pareto import hypervolume
from dfvg_dse.report.plots import plot_importance, plot_pareto
from dfvg_dse.report.tables import pareto_info
from dfvg_dse.search import SAMPLERS, param_importances, run_search, sweep_frame, trials_frame
from dfvg_dse.search import study_exists
from dfvg_dse.search.run import METHODS, Plan, plan_search
from dfvg_dse.search.studies import JOURNAL
from dfvg_dse.specs import InputError
from dfvg_dse.specs.objectives import COSTS, DEFAULT_COST, SPEED_FLAG

def _run_storage(path: Path) -> str:
    """The run folder's own study: a journal file (issue 16: appending a line per trial costs a fifth of
    an SQLite commit), or the SQLite file of a run made before it."""
    older = path / "study.db"
    return f"sqlite:///{older.resolve()}" if older.is_file() else f"{JOURNAL}{(path / 'study.journal').resolve()}"


def plot_suffixes(svg: bool) -> tuple[str, ...]:
    """The Pareto plot's files: PNG, and SVG when asked (it costs about as much again, issue 16)."""
    return ("png", "svg") if svg else ("png",)


def _progress(total: int, already: int, quiet: bool):
    if quiet or not sys.stderr.isatty():
        return None, None
    bar = click.progressbar(length=total, label="search", file=sys.stderr)
    bar.update(already)
    state = [already]

    def advance(done: int) -> None:
        bar.update(done - state[0])
        state[0] = done
    return bar, advance


class _ScanProgress:
    """A progress bar for a scan of the whole grid, shown on a terminal once the scan takes a while."""

    SHOW_AFTER_S = 2.0

    def __init__(self, quiet: bool):
        self.quiet, self.bar, self.started, self.shown = quiet or not sys.stderr.isatty(), None, time.time(), 0

    def advance(self, done: int, total: int) -> None:
        if self.quiet or (self.bar is None and time.time() - self.started < self.SHOW_AFTER_S):
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label="grid points", file=sys.stderr, show_eta=True)
        self.bar.update(done - self.shown)
        self.shown = done

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.render_finish()


def _finish_run(path: Path, study, space: SearchSpace, chosen: dict, request: dict, seed: int, sampler: str,
                url: str, started: float, created: str, plan: Plan, svg: bool = False) -> dict:
    """Every file of the run from its study, the manifest last: until it says finished, readers
    (export, pareto) refuse the folder, so a kill while these are written leaves no mixed run."""
    frame = trials_frame(study)
    info = pareto_info(frame, space.cost)
    for column in ("parents", "ranks"):  # lists as JSON text in the tables
        if column in frame:
            frame[column] = [json.dumps(v) if isinstance(v, list) else v for v in frame[column]]
    export.write_table(path / "trials.csv", frame)
    export.write_table(path / "pareto.csv", frame.iloc[info.front])
    recommended = {name: _design(frame.iloc[i], space, chosen) for name, i in info.picks.items()}
    export.write_json(path / "recommended.json", recommended)
    title = f"{chosen['target']} / {chosen['draft']}: " + (
        f"exact front of {plan.grid_points:,} grid points" if plan.method == "exact" else
        f"{len(frame)} trials, {int(frame['feasible'].sum())} feasible")
    for suffix in plot_suffixes(svg):
        export.write_plot(path / f"pareto.{suffix}", lambda tmp: plot_pareto(info, tmp, title))
    importances = param_importances(study)
    if importances:
        export.write_plot(path / "importance.png", lambda tmp: plot_importance(importances, tmp, title))
    summary = {"run_dir": str(path), "method": plan.method, "method_why": plan.why, "grid_points": plan.grid_points,
               "trials": len(frame), "feasible": int(frame["feasible"].sum()),
               "pareto_size": len(info.front), "storage": url, "seconds": round(time.time() - started, 3),
               "recommended": {k: {"tokens_per_s": v["expected"]["tokens_per_s"],
                                   "tokens_per_s_per_sequence": v["expected"]["tokens_per_s_per_sequence"],
                                   **{k: v["expected"][k] for k in COSTS if k in v["expected"]},
                                   "family": v["family"],
                                   "schedule": v["schedule"], "draft_device": v["draft_device"],
                                   "verify_device": v["verify_device"], "batch": v["batch"]}
                               for k, v in recommended.items()},
               "importances": importances, **({"under_load": request["serving"]} if request.get("serving") else {})}
    if not recommended:
        reasons = frame.loc[~frame["feasible"], "reason"].value_counts()
        summary["no_feasible_design"] = str(reasons.index[0]) if len(reasons) else "no trial completed"
    if "adapt" not in space.families and recommended and plan.front is not None and plan.front.feasible:
        # the whole grid was evaluated (a small space): how much of its exact front the trials hold
        reference = (0.0, plan.front.worst_cost * 1.1)
        found = frame[frame["feasible"]][list(space.objectives)].to_numpy()
        summary["hypervolume_fraction"] = hypervolume(found, reference) / hypervolume(plan.front.values, reference) \
            if len(found) else 0.0
    manifest = {"kind": "search", "status": "finished", "version": __version__, "created": created,
                "finished": datetime.now(timezone.utc).isoformat(), "seed": seed, "sampler": sampler, "storage": url, "inputs": chosen, "request": request,
                "space": {k: list(v) if isinstance(v, tuple) else v for k, v in space_summary(space).items()},
                "git_revision": _git_revision(), "summary": summary}
    export.write_json(path / "manifest.json", manifest)
    return summary


def _git_revision() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _design(row, space: SearchSpace, chosen: dict) -> dict:
    """A trial row as a deployable design (what `export` turns into engine configs)."""
    drafter = next(d for d in space.draft_devices if d.name == row["draft_device"])
    parents = row["parents"] if isinstance(row.get("parents"), list) else json.loads(row.get("parents") or "[-1]")
    ranks = row["ranks"] if isinstance(row.get("ranks"), list) else json.loads(row.get("ranks") or "[0]")
    design = {"target": chosen["target"], "draft": chosen["draft"], "target_source": space.target.source,
              "draft_source": space.draft.source, "draft_device": row["draft_device"], "draft_kind": drafter.kind,
              "verify_device": row["verify_device"], "link": dict((k, v.name) for k, v in space.links).get(
                  row["draft_device"]), "schedule": row["schedule"], "batch": int(row["batch"]),
              "family": row["family"], "depth": int(row["depth"]), "parents": parents, "ranks": ranks,
              "drafter": space.draft.head_kind or "lm",
              "dynamic": row["family"] == "adapt", "trial": int(row["trial"]) if "trial" in row else None}
    for key in ("width", "budget", "threshold", "window_ratio", "fpga_pe_fraction", "fpga_clock_mhz"):
        if key in row and row[key] == row[key]:  # present and not NaN
            design[key] = row[key].item() if hasattr(row[key], "item") else row[key]
    design["expected"] = export.expected_metrics(row)
    design["assumptions"] = [f"acceptance profile '{space.acceptance.name}' ({space.acceptance.source})",
                             f"context {space.context} tokens", "costs from the hwdb defaults (docs/cost-model.md)"]
    return design


def _costs_text(record: dict) -> str:
    """A design's J/token, and its $/Mtoken where its devices are priced."""
    usd = f"  ${record['usd_per_mtoken']:.2f}/Mtoken" if record.get("usd_per_mtoken") is not None else ""
    return f"{record['j_per_token']:7.3f} J/token{usd}"


objectives_option = click.option(
    "--objectives", help=f"The two objectives: {SPEED_FLAG} (per sequence, up) and a cost (down): "
                         f"{', '.join(f'{SPEED_FLAG},{c}' for c in COSTS)} [default: {SPEED_FLAG},{DEFAULT_COST}]. "
                         "usd_per_mtoken: designs on a device without a price per hour are infeasible.")


@cli.command("search")
@engine_option
@click.option("--study", type=click.Path(dir_okay=False), help="A study file (TOML) defining the space.")
@click.option("--target", help=f"Target model [default: {DEFAULTS['target']}].")
@click.option("--draft", help=f"Draft model [default: {DEFAULTS['draft']}].")
@click.option("--acceptance", help="Acceptance SPEC [default: pair:TARGET/DRAFT].")
@click.option("--verify-device", multiple=True, help="Verifier choices (repeat) [default: rtx-4090].")
@click.option("--draft-device", multiple=True, help="Drafter choices (repeat) [default: v80, u280, rtx-4090, xeon].")
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True,
              help="exact: every grid point (up to 2e8; about 4 us each); seeded: a grid sample's front, then the "
                   "sampler; optuna: the sampler alone; auto: exact up to 200,000 grid points, else seeded (a space "
                   "with the adapt family is seeded, or sampled when adapt is all it has).")
@click.option("--trials", type=click.IntRange(1, 10**6), default=500, show_default=True,
              help="Trials of a sampled search (an exact one writes its front).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Worker i of --n-workers uses SEED + i.")
@click.option("--sampler", type=click.Choice(SAMPLERS), default="nsga2", show_default=True)
@click.option("--results-dir", help="Where runs go [env DFVG_DSE_RESULTS_DIR; default ./results].")
@click.option("--run-id", help="Run folder name [default: search-<UTC time>; with --resume: the latest run].")
@click.option("--resume", is_flag=True, help="Continue a run (after a crash or kill) up to --trials.")
@click.option("--force", is_flag=True, help="Replace an existing run folder.")
@click.option("--n-workers", type=click.IntRange(1, 64), default=1, show_default=True, help="Local processes.")
@click.option("--storage", help="Optuna RDB URL shared by workers (e.g. postgresql+psycopg2://user@host/db) [default: a journal file in the run, study.journal].")
@click.option("--svg", is_flag=True, help="Also write pareto.svg (vector; PNG alone by default).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout, no progress bar.")
@click.option("--drafter", "drafters", multiple=True, metavar="NAME[=ACCEPTANCE]",
              help="The drafter as a search dimension (repeat, two or more; instead of --draft and --acceptance): "
                   "one run per drafter in RUN/NAME, their joint front in RUN (docs/search.md).")
@objectives_option
@click.option("--rate", type=FiniteFloatRange(0, 1e6, min_open=True),
              help="Search under load: serve every design at this many requests/s (docs/serving.md); the batch "
                   "choices become the speculation cutoff, $/Mtoken is per million tokens of goodput.")
@click.option("--workload", help="With --rate: request lengths [default: sharegpt-vllm].")
@click.option("--slo-ttft", type=FiniteFloatRange(0, 1e7, min_open=True), help="With --rate: TTFT target, ms.")
@click.option("--slo-tpot", type=FiniteFloatRange(0, 1e7, min_open=True), help="With --rate: TPOT target, ms.")
@click.option("--duration", type=FiniteFloatRange(0, 3600, min_open=True),
              help="With --rate: seconds of arrivals per design [default: 60].")
@click.pass_context
def search_cmd(ctx, study, target, draft, acceptance, verify_device, draft_device, method, trials, seed, sampler,
               results_dir, run_id, resume, force, n_workers, storage, svg, as_json, objectives, drafters, rate,
               workload, slo_ttft, slo_tpot, duration):
    """Multi-objective search (tokens/s up, J/token or $/Mtoken down) over trees, schedules, batch and hardware."""
    serving = serving_request(rate, workload, slo_ttft, slo_tpot, duration)
    if drafters:
        from dfvg_dse.cli.drafter_search import search_drafters
        return search_drafters(ctx, drafters, study=study, target=target, draft=draft, acceptance=acceptance,
                               verify_device=verify_device, draft_device=draft_device, method=method, trials=trials,
                               seed=seed, sampler=sampler, results_dir=results_dir, run_id=run_id, resume=resume,
                               force=force, n_workers=n_workers, storage=storage, svg=svg, as_json=as_json,
                               objectives=objectives, serving=serving)
    path, summary, plan, warnings = search_one(ctx, study, target, draft, acceptance, verify_device, draft_device,
                                               method, trials, seed, sampler, results_dir, run_id, resume, force,
                                               n_workers, storage, svg, as_json, objectives, serving)
    for line in warnings:  # once the run is complete: a refused command says one line, its error
        click.echo(f"warning: {line}", err=True)
    if as_json:
        emit_json(summary)
        return
    _print_summary(path, summary, plan)


def search_one(ctx, study, target, draft, acceptance, verify_device, draft_device, method, trials, seed, sampler,
               results_dir, run_id, resume, force, n_workers, storage, svg, quiet, objectives, serving=None):
    """One search run: (its folder, its summary, its plan, warnings to say once it is complete)."""
    started = time.time()
    base = export.results_dir(results_dir)
    run_id = run_id or (export.latest_run(base) if resume else
                        "search-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S"))
    request = search_request(ctx, study, target, draft, acceptance, verify_device, draft_device, method, objectives,
                             serving)
    joining = resume and storage is not None and not (base / run_id).is_dir()  # another machine's study
    if resume and not joining:
        # the space the run was started with (none when it was killed before its manifest was written)
        saved = export.read_manifest(base / run_id).get("request") if (base / run_id / "manifest.json").is_file() \
            else None
        given = study or target or draft or acceptance or verify_device or draft_device or objectives or serving or \
            ctx.get_parameter_source("engine") is click.core.ParameterSource.COMMANDLINE
        if saved is not None and isinstance(saved, dict):  # runs before engine profiles priced with the roofline,
            # before plans sampled, before --objectives
            saved = {"method": "optuna", "cost": DEFAULT_COST, **saved, "engine": saved.get("engine", "roofline")}
        if saved is None and not given:
            raise InputError(f"{base / run_id}: its manifest has no saved request; pass the same --study and flags")
        if ctx.get_parameter_source("method") is click.core.ParameterSource.COMMANDLINE and saved is not None \
                and saved.get("method") != method:
            default = " (the default)" if saved.get("method") == "auto" else ""
            raise InputError(f"--resume: run '{run_id}' was started with --method {saved.get('method')}{default}; "
                             "resume with that one, or with none")
        if given and saved is not None and {k: v for k, v in request.items() if k not in ("study_path", "method")} != \
                {k: v for k, v in saved.items() if k not in ("study_path", "method")}:
            raise InputError(f"--resume: the study file or flags differ from those run '{run_id}' started with; "
                             "resume with the same ones, or with none")
        if saved is not None:  # a manifest may be old or edited by hand: its study is checked like a file
            if not isinstance(saved, dict) or not isinstance(saved.get("study", {}), dict) or \
                    not isinstance(saved.get("cost", ""), str):
                raise InputError(f"{base / run_id / 'manifest.json'}: request: not a saved search request")
            if saved.get("study"):  # {} when the run was started without --study (the shipped defaults)
                saved = {**saved, "study": check_study(base / run_id / "manifest.json", saved["study"],
                                                       {"families": FAMILIES, "schedules": SCHEDULE_CHOICES})}
        request = saved or request
        ctx.obj["engine"] = request["engine"]  # a resumed run keeps the engine it started with
    space, chosen = search_space(ctx, request)
    unpriced = unpriced_warnings(space)
    scan = _ScanProgress(quiet)
    try:
        plan = plan_search(space, request.get("method", "optuna"), trials, seed, scan.advance)
    finally:
        scan.finish()
    warnings = [f"--trials {trials} not used: {plan.why}; the exact front's {len(plan.queue)} designs are the "
                "run's trials (--method seeded or optuna samples instead)"] \
        if plan.method == "exact" and ctx.get_parameter_source("trials") is click.core.ParameterSource.COMMANDLINE \
        else []
    warnings += unpriced
    trials = plan.trials(trials)
    if storage and not resume:  # a bad URL or a taken study name fails before any folder is touched
        if study_exists(storage, run_id):
            raise InputError(f"a study named '{run_id}' already exists in {storage}; pass --resume to join it "
                             "or choose another --run-id")
    path = export.run_dir(base, run_id, force=force, resume=resume and not joining)
    url = storage or _run_storage(path)
    # "running" until every file agrees (the manifest is written last); a resume keeps the creation time
    previous = export.read_manifest(path) if resume and not joining and (path / "manifest.json").is_file() else {}
    created = previous.get("created") or datetime.now(timezone.utc).isoformat()
    export.write_json(path / "manifest.json", {"kind": "search", "status": "running", "created": created,
                                               "seed": seed, "sampler": sampler, "storage": url, "inputs": chosen,
                                               "request": request})
    bar, advance = _progress(trials, 0, quiet)
    if resume and not joining and not storage and not study_exists(url, run_id):
        resume = False  # killed before its study was created: start it in the folder
    try:
        study_obj = run_search(space, url, run_id, trials, seed, sampler, resume, n_workers, advance, plan.queue)
    finally:
        if bar is not None:
            bar.render_finish()
    summary = _finish_run(path, study_obj, space, chosen, request, seed, sampler, url, started, created, plan, svg)
    export.drop_replaced(path)
    return path, summary, plan, warnings


def load_line(load: dict) -> str:
    """What a search under load reads its objectives as (search --rate)."""
    return (f"under load: {load['rate_per_s']:g} requests/s of {load['workload']}; tokens/s per sequence is 1 / "
            "mean TPOT there, the cost per token of goodput; the batch is the speculation cutoff")


def _print_summary(path: Path, summary: dict, plan: Plan) -> None:
    click.echo(f"{summary['trials']} trials ({summary['feasible']} feasible), {summary['pareto_size']} on the Pareto "
               f"front, in {summary['seconds']:.1f} s -> {path}")
    click.echo(f"method: {plan.method}, {plan.why}")
    if "hypervolume_fraction" in summary and plan.method != "exact":
        click.echo(f"hypervolume of the front: {100 * summary['hypervolume_fraction']:.2f}% of the exact front over "
                   f"{summary['grid_points']:,} grid points")
    load = summary.get("under_load")
    if load:
        click.echo(load_line(load))
    for name, rec in summary["recommended"].items():
        batch = f"speculating up to batch {rec['batch']}" if load else f"batch {rec['batch']}"
        click.echo(f"{name:15s} {rec['tokens_per_s_per_sequence']:8.1f} tokens/s per sequence {_costs_text(rec)}  "
                   f"{rec['family']}, {rec['schedule']}, {batch}, "
                   f"draft on {rec['draft_device']}, verify on {rec['verify_device']}")
    if "no_feasible_design" in summary:
        click.echo(f"no feasible design; most trials failed with: {summary['no_feasible_design']}")
    click.echo(f"plots: {path / 'pareto.png'}; configs: dfvg-dse export {path} --format vllm")


@cli.command("sweep")
@engine_option
@click.option("--study", type=click.Path(dir_okay=False), help="A study file (TOML) defining the space.")
@click.option("--target")
@click.option("--draft")
@click.option("--acceptance")
@click.option("--verify-device", multiple=True)
@click.option("--draft-device", multiple=True)
@click.option("--results-dir", help="Where runs go [env DFVG_DSE_RESULTS_DIR; default ./results].")
@click.option("--run-id", help="Run folder name [default: sweep-<UTC time>].")
@click.option("--force", is_flag=True, help="Replace an existing run folder.")
@click.option("--compare", "compare_run", type=click.Path(file_okay=False), help="A search run to score against the exact front.")
@click.option("--save-grid", is_flag=True, help="Also write every grid point (grid.csv).")
@click.option("--svg", is_flag=True, help="Also write pareto.svg (vector; PNG alone by default).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@objectives_option
@click.pass_context
def sweep_cmd(ctx, study, target, draft, acceptance, verify_device, draft_device, results_dir, run_id, force,
              compare_run, save_grid, svg, as_json, objectives):
    """Evaluate the whole space on its grid (vectorised) and write the exact Pareto front."""
    started = time.time()
    space, chosen = search_space(ctx, search_request(ctx, study, target, draft, acceptance, verify_device, draft_device,
                                                     objectives=objectives))
    if space.families == ("adapt",):
        raise InputError("sweep evaluates static tree families on a grid; ADAPT needs a Monte Carlo run per point: "
                         "use search for it")
    warnings = unpriced_warnings(space)
    trials = None
    if compare_run:  # before any work
        compared, trials = export.read_run(Path(compare_run), command="sweep --compare")
        if export.run_cost(compared) != space.cost:
            raise InputError(f"--compare {compare_run}: that run minimised {export.run_cost(compared)}, this sweep "
                             f"{space.cost}: pass --objectives {SPEED_FLAG},{export.run_cost(compared)}")
    grid = sweep_frame(space)
    seconds = time.time() - started
    feasible = grid[grid["feasible"]]
    info = pareto_info(grid, space.cost)
    front = grid.iloc[info.front]
    run_id = run_id or "sweep-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    summary = {"grid_points": len(grid), "feasible": len(feasible), "pareto_size": len(front),
               "evaluation_seconds": round(seconds, 3),
               "max_tokens_per_s_per_sequence": float(feasible["tokens_per_s_per_sequence"].max())
               if len(feasible) else None,
               f"min_{space.cost}": float(feasible[space.cost].min()) if len(feasible) else None}
    if compare_run:
        if feasible.empty:
            raise InputError("--compare: the swept space has no feasible design to compare with")
        found = trials[trials["feasible"]][list(space.objectives)].to_numpy()
        exact = feasible[list(space.objectives)].to_numpy()
        reference = (0.0, float(exact[:, 1].max()) * 1.1)
        summary["hypervolume_fraction"] = hypervolume(found, reference) / hypervolume(exact, reference)
    path = export.run_dir(export.results_dir(results_dir), run_id, force=force)
    summary = {"run_dir": str(path), **summary}
    title = f"{chosen['target']} / {chosen['draft']}: exact front of {len(grid):,} grid points"
    try:  # a sweep costs seconds: a folder that could not be completed goes, and a replaced run comes back
        export.write_table(path / "pareto.csv", front)
        if save_grid:
            export.write_table(path / "grid.csv", grid)
        for suffix in plot_suffixes(svg):
            export.write_plot(path / f"pareto.{suffix}", lambda tmp: plot_pareto(info, tmp, title))
        export.write_json(path / "manifest.json", {"kind": "sweep", "version": __version__,
                                                   "created": datetime.now(timezone.utc).isoformat(),
                                                   "inputs": chosen, "space": space_summary(space),
                                                   "git_revision": _git_revision(), "summary": summary})
    except BaseException:
        export.abandon_run(path)
        raise
    export.drop_replaced(path)  # only now is the new run complete
    for line in warnings:
        click.echo(f"warning: {line}", err=True)
    if as_json:
        emit_json(summary)
        return
    click.echo(f"{len(grid):,} grid points ({len(feasible):,} feasible) evaluated in {seconds:.2f} s; "
               f"{len(front)} on the exact Pareto front -> {path}")
    if "hypervolume_fraction" in summary:
        click.echo(f"the search run's front covers {100 * summary['hypervolume_fraction']:.2f}% of the exact hypervolume")


@cli.command("pareto")
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--svg", is_flag=True, help="Also write pareto.svg [default: when the run has one].")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def pareto_cmd(run, svg, as_json):
    """Redraw a finished run's Pareto plots (pareto.png, pareto.svg) from its trials.csv."""
    path = Path(run)
    manifest, frame = export.read_run(path, sweeps=True)
    export.remove_temporaries(path)  # what a killed redraw left
    info = pareto_info(frame, export.run_cost(manifest))
    inputs = manifest.get("inputs", {})
    what = "grid points" if manifest.get("kind") == "sweep" else "trials"
    title = f"{inputs.get('target', '?')} / {inputs.get('draft', '?')}: {len(frame)} {what}"
    suffixes = plot_suffixes(svg or (path / "pareto.svg").is_file())
    for suffix in suffixes:
        export.write_plot(path / f"pareto.{suffix}", lambda tmp: plot_pareto(info, tmp, title))
    summary = {"run_dir": str(path), "trials": len(frame), "pareto_size": len(info.front),
               "picks": {k: int(frame.iloc[i]["trial"]) if "trial" in frame else int(i) for k, i in info.picks.items()}}
    if as_json:
        emit_json(summary)
    else:
        also = " and .svg" if "svg" in suffixes else ""
        click.echo(f"redrew {path / 'pareto.png'}{also}: {len(info.front)} points on the front")
