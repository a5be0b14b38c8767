"""The export command: a searched design as deployment artefacts for a serving engine, realised as
the engine runs it and priced (docs/search.md, "Exports")."""

from __future__ import annotations

from pathlib import Path

import click

from dfvg_dse import export
from dfvg_dse.cli._base import catalog_of, cli, emit_json, emit_table
from dfvg_dse.cli.space import search_space
from dfvg_dse.specs.objectives import PICKS
from dfvg_dse.pipeline.realise import realise_and_price
from dfvg_dse.report.engines import FORMATS, engine_config, engine_dtype, realised_record
from dfvg_dse.specs import InputError, TreeSpec
from dfvg_dse.specs.deploy import ENGINES
from dfvg_dse.specs.drafter import LOOKUP_KINDS



def _designs(path: Path, manifest: dict, frame, pick: str | None, trial: int | None) -> list[tuple[str, dict]]:
    """(name, design) of the picks asked for or of one trial."""
    recommended_path = path / "recommended.json"
    if trial is not None and pick is not None:
        raise InputError("give --pick or --trial, not both")
    if trial is None:
        if not recommended_path.is_file():
            raise InputError(f"{path}: no recommended.json (no feasible design); use --trial N")
        picks = export.read_recommended(recommended_path)
        names = [n for n in PICKS if n in picks] if pick == "all" else (pick or "knee",)
        missing = [n for n in names if picks.get(n) is None]
        if missing:
            held = ", ".join(n for n in PICKS if n in picks)
            raise InputError(f"{path}: no '{missing[0]}' design recorded (the run minimised "
                             f"{export.run_cost(manifest)}; its picks: {held or 'none'})")
        return [(n, picks[n]) for n in names]
    rows = frame[frame["trial"] == trial]
    if rows.empty:
        raise InputError(f"--trial {trial}: not in {path / 'trials.csv'}")
    row = rows.iloc[0]
    if not bool(row["feasible"]):
        raise InputError(f"--trial {trial}: infeasible ({row['reason']})")
    picks = export.read_recommended(recommended_path) if recommended_path.is_file() else {}
    template = next(iter(picks.values()), {})
    design = {**{k: template.get(k) for k in ("target", "draft", "target_source", "draft_source", "assumptions")},
              **_row_design(row, manifest, template, path / "trials.csv")}
    return [(f"trial-{trial}", design)]


def _row_design(row, manifest: dict, template: dict, table: Path) -> dict:
    kinds = {template.get("draft_device"): template.get("draft_kind")}
    parents, ranks = export.row_tree(table, row)
    design = {"draft_device": row["draft_device"], "verify_device": row["verify_device"],
              "draft_kind": kinds.get(row["draft_device"], "fpga" if "fpga_pe_fraction" in row and
                                      row["fpga_pe_fraction"] == row["fpga_pe_fraction"] else "gpu"),
              "schedule": row["schedule"], "batch": int(row["batch"]), "family": row["family"], "depth": int(row["depth"]),
              "parents": parents, "ranks": ranks,
              "dynamic": row["family"] == "adapt", "trial": int(row["trial"]),
              "link": manifest.get("space", {}).get("links", {}).get(row["draft_device"])}
    design["expected"] = export.expected_metrics(row)
    return design


class _Pricer:
    """The run's space rebuilt per cost profile (its request, GPUs priced by that profile)."""

    def __init__(self, ctx, path: Path, manifest: dict):
        request = manifest.get("request")
        if not isinstance(request, dict):
            raise InputError(f"{path / 'manifest.json'}: no 'request' to rebuild the searched space from "
                             "(a run older than this version): run the search again")
        self.ctx, self.request, self.spaces = ctx, request, {}

    def space(self, cost_profile: str):
        if cost_profile not in self.spaces:
            self.spaces[cost_profile] = search_space(self.ctx, self.request, catalog_of(self.ctx).with_engine(cost_profile))
        return self.spaces[cost_profile]


def _noun(kind: str) -> str:
    return "lookup" if kind in LOOKUP_KINDS else "head"


def _engine_export(design: dict, fmt: str, support, pricer: _Pricer, options_file: str) -> dict:
    space, chosen = pricer.space(support.cost_profile)
    kind = space.draft.head_kind  # the engines run heads through their own methods (eagle3, EAGLE3, NEXTN)
    if kind and support.head_method(kind) is None:
        raise InputError(f"--format {fmt}: the design drafts with the {kind} {_noun(kind)} '{chosen['draft']}', which "
                         f"{support.display_name} {support.version} runs no method for here "
                         "(hwdb/engine-support/ENGINE.toml head_methods: the engines that do)")
    tree = TreeSpec(tuple(design["parents"]), tuple(design["ranks"]))
    realised, est = realise_and_price(space, tree, int(design["batch"]), design["verify_device"], support,
                                      chosen["target_dtype"], chosen["draft_dtype"])
    record = realised_record(realised, est, support.cost_profile)
    # a design priced at mean context c serves sequences of up to 2c (prompt and output alike)
    group = next(d for d in space.verify_devices if d.name == design["verify_device"]).parallel
    settings = {"dtype": engine_dtype(chosen["target_dtype"]), "max_len": 2 * space.context, "max_new_tokens": space.context,
                "tensor_parallel": group.tensor if group else 1, "pipeline_parallel": group.pipeline if group else 1,
                "expert_parallel": group.expert if group and space.target.moe is not None else 1,
                "options_file": options_file}
    # the drafter as the run's space has it (a --trial design carries no kind of its own)
    lookup = catalog_of(pricer.ctx).lookup_entry(space.draft.name).spec if space.draft.drafts_by_lookup else None
    sizes = {"lookup": lookup.params} if lookup else {}
    return engine_config({**design, "drafter": kind or "lm", **sizes}, fmt, support, record, settings)


def _out_path(path: Path, name: str, fmt: str, output: str | None) -> Path:
    if output:
        return Path(output)
    return path / (f"export-{name}.json" if fmt == "json" else f"export-{name}.{fmt}.json")


def _summary_row(name: str, config: dict) -> list[str]:
    searched, realised = config["searched"], config["realised"]

    def cell(block: dict, key: str, fmt: str) -> str:
        return format(block[key], fmt) if block.get(key) is not None else "-"
    shape = f"{realised['family']} d{realised['depth']}" + (f" top-{realised['topk']} n{realised['draft_tokens']}"
                                                           if realised["topk"] > 1 else "")
    return [name, f"{config['display_name']} {config['engine_version']}",
            f"{searched['family']} d{searched['depth']} b{searched['batch']} {searched['schedule']}",
            f"{shape} b{realised['batch']}", cell(searched, "tokens_per_s_per_sequence", ".1f"),
            cell(realised, "tokens_per_s_per_sequence", ".1f") if realised["feasible"] else "infeasible",
            cell(searched, "j_per_token", ".3f"), cell(realised, "j_per_token", ".3f")]


@cli.command("export")
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--pick", type=click.Choice([*PICKS, "all"]), help="[default: knee]")
@click.option("--trial", type=int, help="Export this trial instead of a pick.")
@click.option("--format", "fmt", type=click.Choice([*FORMATS, "all"]), default="json", show_default=True,
              help="ours (json), one engine's, or every engine's (all).")
@click.option("--engine-version", help="The engine release to export for [default: the newest checked, "
              "hwdb/engine-support/ENGINE.toml].")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write here [default: RUN/export-PICK.FORMAT.json, RUN/export-PICK.json for json; trtllm also "
              "writes its options file beside, .yaml]; one design and one format only.")
@click.option("--json", "as_json", is_flag=True, help="Print the export(s) as JSON instead of the command(s).")
@click.pass_context
def export_cmd(ctx, run, pick, trial, fmt, engine_version, output, as_json):
    """A deployment config for a recommended design: ours (json) or a serving engine's."""
    path = Path(run)
    manifest, frame = export.read_run(path)
    export.remove_temporaries(path)  # what a killed export left
    if manifest.get("drafters"):  # search --drafter: each pick is a trial of one drafter's run
        return _export_drafter_picks(ctx, path, manifest, frame, pick, trial, fmt, engine_version, output, as_json)
    designs = _designs(path, manifest, frame, pick, trial)
    formats = ENGINES if fmt == "all" else (fmt,)
    if engine_version is not None and (fmt in ("json", "all")):
        raise InputError("--engine-version: give one engine's --format (vllm, sglang, hf or trtllm)")
    if output is not None and len(designs) * len(formats) > 1:
        raise InputError("--output: one design and one format only (--pick all and --format all write RUN/export-*)")
    catalog = catalog_of(ctx)
    releases = {f: catalog.engine_support(f, engine_version) for f in formats if f != "json"}
    pricer = _Pricer(ctx, path, manifest) if releases else None
    kind = (pricer.space(next(iter(releases.values())).cost_profile)[0].draft.head_kind or "lm") \
        if pricer is not None and releases else "lm"  # one run, one drafter
    if fmt == "all" and kind != "lm":  # every engine that runs the head; the others said once
        skipped = [f for f, r in releases.items() if r.head_method(kind) is None]
        if skipped:
            click.echo(f"warning: --format all: {', '.join(releases[f].display_name for f in skipped)} run no "
                       f"method for {kind} {_noun(kind)}s here: not exported", err=True)
        formats = tuple(f for f in formats if f not in skipped)
        releases = {f: r for f, r in releases.items() if f not in skipped}
    configs = []  # every export is built before any is written: a refusal leaves no partial set
    for name, design in designs:
        for f in formats:
            out = _out_path(path, name, f, output)
            options = str(out.with_name(out.with_suffix("").name + ".yaml"))  # as the command will find it
            config = engine_config(design, "json") if f == "json" else \
                _engine_export(design, f, releases[f], pricer, options)
            configs.append((name, f, out, config))
    for name, f, out, config in configs:
        export.write_json(out, config)
        if f == "trtllm":
            export.write_text(Path(config["options_file"]), config["yaml"])
    if as_json:
        emit_json(configs[0][3] if len(configs) == 1 else [c for *_, c in configs])
    elif fmt == "json":
        for *_, out, _config in configs:
            click.echo(f"wrote {out}")
    elif len(configs) == 1:
        _, f, out, config = configs[0]
        click.echo(config["command"] if "command" in config else config["python"].rstrip("\n"))
        click.echo(f"# {_summary_line(config)}")
        click.echo(f"# wrote {out}" + (f" and {config['options_file']}" if f == "trtllm" else ""))
    else:
        emit_table([_summary_row(name, config) for name, _, _, config in configs],
                   ["design", "engine", "searched", "realised", "searched tok/s/seq", "realised tok/s/seq",
                    "searched J/token", "realised J/token"])
        click.echo(f"wrote {len(configs)} exports to {path}/export-*.json (each one's command under 'command', "
                   "or 'python' for transformers)")


def _export_drafter_picks(ctx, path: Path, manifest: dict, frame, pick, trial, fmt, engine_version, output,
                          as_json) -> None:
    """The picks of a search over drafters, each exported from its drafter's run (RUN/NAME) as that
    run's trial."""
    if trial is not None:
        raise InputError(f"--trial: {path} searched several drafters, and its trials belong to their runs: "
                         f"export {path}/NAME --trial N (NAME: {', '.join(d['run'] for d in manifest['drafters'])})")
    designs = _designs(path, manifest, frame, pick, None)
    if len(designs) > 1 and (as_json or output is not None):
        raise InputError("--pick all: with --json or --output, one pick at a time from a search over drafters")
    runs = {d["run"] for d in manifest["drafters"]}
    for name, design in designs:
        if design.get("run") not in runs or not (path / design["run"]).is_dir() or \
                isinstance(design.get("run_trial"), bool) or not isinstance(design.get("run_trial"), int):
            raise InputError(f"{path / 'recommended.json'}: {name}: run = {str(design.get('run'))[:40]!r}, run_trial = "
                             f"{str(design.get('run_trial'))[:20]!r}: need one of this search's runs "
                             f"({', '.join(sorted(runs))}) and a trial number")
        if not as_json:
            click.echo(f"# {name}: {design['draft']}, trial {design['run_trial']} of {path / design['run']}")
        ctx.invoke(export_cmd, run=str(path / design["run"]), pick=None, trial=design["run_trial"], fmt=fmt,
                   engine_version=engine_version, output=output, as_json=as_json)


def _summary_line(config: dict) -> str:
    searched, realised = config["searched"], config["realised"]
    if not realised["feasible"]:
        return f"realised design infeasible: {realised['reason']}"
    def usd(block: dict) -> str:
        return f", ${block['usd_per_mtoken']:.2f}/Mtoken" if block.get("usd_per_mtoken") is not None else ""
    return (f"searched {searched.get('tokens_per_s_per_sequence', float('nan')):.1f} tokens/s per sequence, "
            f"{searched.get('j_per_token', float('nan')):.3f} J/token{usd(searched)}; as {config['display_name']} "
            f"{config['engine_version']} runs it ({realised['family']}, depth {realised['depth']}, batch "
            f"{realised['batch']}, priced by the '{realised['cost_profile']}' profile): "
            f"{realised['tokens_per_s_per_sequence']:.1f} tokens/s per sequence, {realised['j_per_token']:.3f} J/token"
            f"{usd(realised)}")
