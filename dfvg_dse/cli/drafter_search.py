"""`search --drafter NAME[=ACCEPTANCE] ...`: the drafter as a search dimension (issue 18; docs/search.md,
"Drafters as a dimension").

Each drafter (a draft model, a head or a lookup) is searched as its own run in RUN/NAME: its space
differs in more than one axis (its acceptance sets every tree's tokens, a head drafts in turn, a
lookup drafts chains on the host), and each is a complete run that `export`, `pareto` and `--resume`
read. Their trials are then put side by side in RUN: trials.csv (with columns `drafter` and `run`),
the joint front (pareto.csv), picks that name their run and its trial (recommended.json: `run`,
`run_trial`; `trial` numbers RUN's own table), the plot with
one colour per drafter and placement, and the manifest, written last.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import click

from dfvg_dse import __version__, export
from dfvg_dse.cli._base import emit_json
from dfvg_dse.cli.space import search_request, search_space
from dfvg_dse.cli.search import _costs_text, _design, load_line, plot_suffixes, search_one
from dfvg_dse.report.plots import plot_pareto
from dfvg_dse.report.tables import joint_trials, pareto_info
from dfvg_dse.specs import InputError
from dfvg_dse.specs.objectives import DEFAULT_COST

MAX_DRAFTERS = 16


def parse_drafters(values: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """NAME or NAME=ACCEPTANCE, each name once, two to MAX_DRAFTERS of them."""
    out = []
    for value in values:
        name, _, acceptance = value.partition("=")
        name = name.strip()
        if not name or (acceptance == "" and "=" in value):
            raise InputError(f"--drafter {value!r}: expected NAME or NAME=ACCEPTANCE (e.g. eagle3-qwen3-8b=0.8)")
        if name in (n for n, _ in out):
            raise InputError(f"--drafter {name}: given twice; each drafter once")
        out.append((name, acceptance.strip() or None))
    if not 2 <= len(out) <= MAX_DRAFTERS:
        raise InputError(f"--drafter: give 2 to {MAX_DRAFTERS} drafters to search over (one: --draft NAME)")
    return out


def _refuse(params: dict) -> None:
    for option, key in (("--draft", "draft"), ("--acceptance", "acceptance")):
        if params[key]:
            raise InputError(f"{option}: not with --drafter; give each drafter's acceptance as NAME=ACCEPTANCE")
    if params["resume"]:
        raise InputError("--resume: not with --drafter; resume one drafter's run with "
                         "'dfvg-dse search --resume --results-dir RUN --run-id NAME'")
    if params["storage"]:
        raise InputError("--storage: not with --drafter (each drafter's run keeps its study in its folder)")


def search_drafters(ctx, drafters: tuple[str, ...], **params) -> None:
    """One search per drafter in RUN/NAME, then the joint front in RUN."""
    started = time.time()
    chosen_drafters = parse_drafters(drafters)
    _refuse(params)
    for name, acceptance in chosen_drafters:  # every drafter's space is checked before any run starts
        search_space(ctx, search_request(ctx, params["study"], params["target"], name, acceptance,
                                         params["verify_device"], params["draft_device"], params["method"],
                                         params["objectives"], params["serving"]))
    base = export.results_dir(params["results_dir"])
    run_id = params["run_id"] or "search-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = export.run_dir(base, run_id, force=params["force"])
    created = datetime.now(timezone.utc).isoformat()
    export.write_json(path / "manifest.json", {"kind": "search", "status": "running", "created": created})
    frames, runs, warnings = [], [], []
    for name, acceptance in chosen_drafters:
        sub, summary, plan, said = search_one(
            ctx, params["study"], params["target"], name, acceptance, params["verify_device"], params["draft_device"],
            params["method"], params["trials"], params["seed"], params["sampler"], str(path), name, False, False,
            params["n_workers"], None, params["svg"], True, params["objectives"], params["serving"])
        warnings += [f"{name}: {line}" for line in said]
        manifest, frame = export.read_run(sub)
        served = manifest["space"].get("serving")  # the load every drafter's run was served under, resolved
        runs.append({"drafter": name, "acceptance": manifest["inputs"]["acceptance"], "run": name,
                     "method": plan.method, "trials": summary["trials"], "feasible": summary["feasible"],
                     "pareto_size": summary["pareto_size"], "request": manifest["request"]})
        frames.append((name, frame))
    cost = runs[0]["request"].get("cost", DEFAULT_COST)
    summary = _write_joint(ctx, path, joint_trials(frames), runs, cost, params["svg"])
    summary["seconds"] = round(time.time() - started, 3)
    if params["serving"]:
        summary["under_load"] = params["serving"]
    export.write_json(path / "manifest.json", {
        "kind": "search", "status": "finished", "version": __version__, "created": created,
        "finished": datetime.now(timezone.utc).isoformat(), "inputs": {"target": summary["target"],
                                                                       "draft": ", ".join(r["drafter"] for r in runs)},
        "drafters": [{k: v for k, v in r.items() if k != "request"} for r in runs],
        "space": {"cost": cost, **({"serving": served} if served else {})},
        "summary": summary})
    export.drop_replaced(path)
    for line in warnings:
        click.echo(f"warning: {line}", err=True)
    if params["as_json"]:
        emit_json(summary)
        return
    for r in runs:
        click.echo(f"{r['drafter']:24s} {r['trials']} trials ({r['feasible']} feasible), {r['pareto_size']} on its "
                   f"front ({r['method']}) -> {path / r['run']}")
    click.echo(f"joint front: {summary['pareto_size']} designs, from {', '.join(summary['front_drafters']) or 'none'}")
    load = summary.get("under_load")
    if load:
        click.echo(load_line(load))
    for pick, rec in summary["recommended"].items():
        batch = f"speculating up to batch {rec['batch']}" if load else f"batch {rec['batch']}"
        click.echo(f"{pick:15s} {rec['drafter']:24s} {rec['tokens_per_s_per_sequence']:8.1f} tokens/s per sequence "
                   f"{_costs_text(rec)}  {rec['family']}, {rec['schedule']}, {batch}, draft on "
                   f"{rec['draft_device']}, verify on {rec['verify_device']}")
    click.echo(f"plots: {path / 'pareto.png'}; configs: dfvg-dse export {path} --format vllm")


def _write_joint(ctx, path, frame, runs: list[dict], cost: str, svg: bool) -> dict:
    """trials.csv, pareto.csv, recommended.json and the plot of the drafters side by side."""
    info = pareto_info(frame, cost)
    export.write_table(path / "trials.csv", frame)
    export.write_table(path / "pareto.csv", frame.iloc[info.front])
    spaces = {r["run"]: search_space(ctx, r["request"]) for r in runs}
    recommended = {}
    for pick, i in info.picks.items():
        row = frame.iloc[i]
        space, chosen = spaces[row["run"]]
        recommended[pick] = {**_design(row, space, chosen), "run": row["run"], "run_trial": int(row["run_trial"])}
    export.write_json(path / "recommended.json", recommended)
    target = next(iter(spaces.values()))[1]["target"]
    title = f"{target}: {len(runs)} drafters, {len(frame)} designs"
    for suffix in plot_suffixes(svg):
        export.write_plot(path / f"pareto.{suffix}", lambda tmp: plot_pareto(info, tmp, title))
    front = frame.iloc[info.front]
    return {"run_dir": str(path), "target": target, "trials": len(frame), "feasible": int(frame["feasible"].sum()),
            "pareto_size": len(info.front), "front_drafters": list(dict.fromkeys(front["drafter"])),
            "front_share": {r["drafter"]: int((front["drafter"] == r["drafter"]).sum()) for r in runs},
            "recommended": {k: {"drafter": v["draft"], "run": v["run"], "run_trial": v["run_trial"], **v["expected"],
                                **{key: v[key] for key in ("family", "schedule", "batch", "draft_device",
                                                           "verify_device")}}
                            for k, v in recommended.items()}}
