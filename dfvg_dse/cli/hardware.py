"""Commands on the databases and the cost model: hw, models, cost."""

from __future__ import annotations

import click

from dfvg_dse.catalog import HW_KINDS
from dfvg_dse.cli._base import (engine_option, parallel_options, MAX_POINTS, MAX_VALUE, catalog_of, cli, emit_json, emit_json_list, emit_table,
                              emit_warnings, parse_int_list)
from dfvg_dse.report import cost_records, device_inputs, head_record, hw_record, hw_summary, lookup_record, model_record
from dfvg_dse.specs import InputError
from dfvg_dse.units import DTYPE_BYTES, TAGS


# -- hw ---------------------------------------------------------------------------------------
@cli.group()
def hw() -> None:
    """Hardware database: FPGAs, GPUs, CPUs and links."""


@hw.command("list")
@click.option("--kind", type=click.Choice(HW_KINDS), help="Only this kind.")
@click.option("--json", "as_json", is_flag=True, help="One JSON list on stdout.")
@click.pass_context
def hw_list(ctx: click.Context, kind: str | None, as_json: bool) -> None:
    """List hardware entries with their key figures."""
    entries = catalog_of(ctx).hw_entries(kind)
    if as_json:
        emit_json([hw_record(e) for e in entries])
        return
    emit_table([[e.spec.name, e.kind, e.spec.display_name, hw_summary(e)] for e in entries],
                ["name", "kind", "display name", "key figures"])


@hw.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def hw_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show one entry: every number with its unit, tag and source."""
    entry = catalog_of(ctx).hw_entry(name)
    record = hw_record(entry)
    if as_json:
        emit_json(record)
        return
    click.echo(f"{record['name']} ({record['kind']}): {record['display_name']}")
    click.echo(f"file: {record['path']}")
    emit_table([[f, f"{q['value']:g} {q['unit']}", q["tag"], q["source"]] for f, q in record["sources"].items()],
                ["field", "value", "tag", "source"])
    click.echo("")
    if entry.kind == "link":
        click.echo(f"model inputs: {hw_summary(entry)}")
    else:
        emit_table([list(row) for row in device_inputs(entry.spec)], ["model input (after defaults)", "value"])


# -- models -----------------------------------------------------------------------------------
@cli.group()
def models() -> None:
    """Model database: shapes of draft and target LLMs."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON list on stdout.")
@click.pass_context
def models_list(ctx: click.Context, as_json: bool) -> None:
    """List models with their parameter counts."""
    records = [model_record(e) for e in catalog_of(ctx).model_entries()]
    if as_json:
        emit_json(records)
        return
    emit_table([[r["name"], r["family"], f"{r['params'] / 1e9:.3f}", r["spec"]["n_layers"], r["spec"]["d_model"],
                  r["spec"]["weight_dtype"], r["tag"]] for r in records],
                ["name", "family", "params (1e9)", "layers", "hidden", "dtype", "tag"])


@models.command("heads")
@click.option("--json", "as_json", is_flag=True, help="One JSON list on stdout.")
@click.pass_context
def models_heads(ctx: click.Context, as_json: bool) -> None:
    """List draft heads (EAGLE, EAGLE-3, Medusa, MTP; models/heads/) with their parameter counts."""
    catalog = catalog_of(ctx)
    records = [head_record(catalog.head_entry(n)) for n in catalog.head_names()]
    if as_json:
        emit_json(records)
        return
    emit_table([[r["name"], r["kind"], r["target"], f"{r['params'] / 1e6:.1f}", f"{r['draft_vocab']:,}",
                 f"{r['weight_bytes_per_draft_step'] / 1e6:.0f}", f"{r['feature_values_per_token']:,}", r["tag"]]
                for r in records],
               ["name", "kind", "target", "params (1e6)", "draft vocab", "MB read per step", "features read",
                "tag"])


@models.command("lookups")
@click.option("--json", "as_json", is_flag=True, help="One JSON list on stdout.")
@click.pass_context
def models_lookups(ctx: click.Context, as_json: bool) -> None:
    """List model-free drafters (n-gram prompt lookup, suffix decoding; models/lookups/) with their host-CPU cost."""
    catalog = catalog_of(ctx)
    records = [lookup_record(catalog.lookup_entry(n)) for n in catalog.lookup_names()]
    if as_json:
        emit_json(records)
        return
    emit_table([[r["name"], r["kind"], _matching(r), f"{r['lookup_us_per_round']:.1f}",
                 f"{r['lookup_ns_per_context_token']:.1f}", r["tag"]] for r in records],
               ["name", "kind", "matches", "us per round", "ns per context token", "tag"])


def _matching(record: dict) -> str:
    """What a lookup matches, in a few words: its n-gram sizes, or its suffix tree."""
    if record["kind"] == "ngram":
        return f"n-grams of {record['min_ngram']}..{record['max_ngram']}"
    return (f"suffix tree {record['max_tree_depth']} deep, <= {record['max_spec_factor']:g} x match, "
            f"p >= {record['min_token_prob']:g}")


def _show_head(record: dict, as_json: bool) -> None:
    if as_json:
        emit_json(record)
        return
    whom = f" head for {record['target']}" if "target" in record else " drafter, for any target"
    click.echo(f"{record['name']}: {record['display_name']} ({record['kind']}{whom})")
    click.echo(f"source: {record['source']} [{record['tag']}]")
    emit_table([[k, f"{v:,}" if isinstance(v, int) else f"{v:.4g}" if isinstance(v, float) else v] for k, v in record.items()
                if k not in ("name", "display_name", "kind", "target", "source", "tag", "path")], ["field", "value"])


@models.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def models_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show one model, draft head or lookup drafter: shape, parameter counts and source."""
    catalog = catalog_of(ctx)
    if name not in catalog.model_names() and name in catalog.head_names():
        _show_head(head_record(catalog.head_entry(name)), as_json)
        return
    if name not in catalog.model_names() and name in catalog.lookup_names():
        _show_head(lookup_record(catalog.lookup_entry(name)), as_json)
        return
    record = model_record(catalog.model_entry(name))
    if as_json:
        emit_json(record)
        return
    click.echo(f"{record['name']}: {record['display_name']} ({record['family']})")
    click.echo(f"source: {record['source']} [{record['tag']}]")
    click.echo(f"params: {record['params']:,} ({record['params_non_embedding']:,} non-embedding)")
    if "published_params" in record:
        pub = record["published_params"]
        click.echo(f"published: {pub['value']:.4g} ({pub['source']})")
    emit_table([[k, v] for k, v in record["spec"].items() if k not in ("name", "display_name", "source")],
                ["field", "value"])


@models.command("import")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--name", required=True, help="Name of the new model file (lower case, digits, '.', '-', '_').")
@click.option("--source", help="Where the config comes from (default: the file's path).")
@click.option("--tag", type=click.Choice(TAGS), default="unverified", show_default=True, help="Provenance tag.")
@click.option("--out-dir", type=click.Path(file_okay=False), help="Write here instead of the models directory.")
@click.option("--force", is_flag=True, help="Replace an existing file.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def models_import(ctx: click.Context, config: str, name: str, source: str | None, tag: str, out_dir: str | None,
                  force: bool, as_json: bool) -> None:
    """Turn a Hugging Face config.json into a model file."""
    path, spec = catalog_of(ctx).import_model(config, name, source, tag, out_dir, force)
    if as_json:
        emit_json({"name": spec.name, "path": str(path), "family": spec.family})
    else:
        click.echo(f"wrote {path} ({spec.family}, {spec.n_layers} layers, hidden {spec.d_model})")


# -- cost -------------------------------------------------------------------------------------
@cli.command()
@engine_option
@click.option("--model", "model_name", required=True, help="Model name (see `models list`).")
@click.option("--device", "device_name", required=True, help="Device name (see `hw list`).")
@click.option("--tokens", default="1", show_default=True,
              help=f"New tokens per forward n: 4, 1,2,4 or 1-256:x2 (values up to {MAX_VALUE:.0e}; at most "
                   f"{MAX_POINTS:,} points of n x c x b per call).")
@click.option("--context", default="0", show_default=True, help="Tokens already in the KV cache c (same forms).")
@click.option("--batch", default="1", show_default=True, help="Sequences b (same forms).")
@click.option("--weight-dtype", type=click.Choice(list(DTYPE_BYTES)), help="Override the model's weight dtype.")
@click.option("--kv-dtype", type=click.Choice(list(DTYPE_BYTES)), help="Override the KV-cache dtype.")
@parallel_options("", "--device")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout: one object, or a list for several points.")
@click.pass_context
def cost(ctx: click.Context, model_name: str, device_name: str, tokens: str, context: str, batch: str,
         weight_dtype: str | None, kv_dtype: str | None, device_tp: int, device_pp: int, device_ep: int, as_json: bool) -> None:
    """Time of one forward pass on one device (or a group of GPUs): bound, FLOPs, bytes and memory fit
    (per device for a group)."""
    catalog = catalog_of(ctx)
    model = catalog.model(model_name).with_dtypes(weight_dtype, kv_dtype)
    device = catalog.device(device_name, tensor=device_tp, pipeline=device_pp, expert=device_ep)
    grid = [parse_int_list(tokens, "--tokens", 1), parse_int_list(context, "--context", 0),
            parse_int_list(batch, "--batch", 1)]
    if len(grid[0]) * len(grid[1]) * len(grid[2]) > MAX_POINTS:
        raise InputError(f"--tokens x --context x --batch: {len(grid[0]) * len(grid[1]) * len(grid[2]):,} points; "
                         f"at most {MAX_POINTS:,} per call")
    records = cost_records(model, device, *grid)
    if as_json:
        points = len(grid[0]) * len(grid[1]) * len(grid[2])
        emit_json(next(records)) if points == 1 else emit_json_list(records)
        return
    rows, warnings, first = [], [], None
    for r in records:  # rows as text only: the records themselves are not kept
        first = first or r
        rows.append([r["tokens"], r["context"], r["batch"], f"{r['time_s'] * 1e3:.3f}", f"{r['tokens_per_s']:.1f}",
                     r["bound"], f"{r['flops']:.3e}", f"{r['bytes']:.3e}",
                     ("yes" if r["memory_fit"]["fits"] else "NO") + f" ({r['memory_fit']['required_bytes'] / 1e9:.3g} "
                     f"of {r['memory_fit']['capacity_bytes'] / 1e9:.3g} GB)"])
        warnings.extend(r["warnings"])
    priced = f" with {first['engine']}'s kernels" if first["engine"] != "roofline" else ""
    each = " (FLOPs, bytes and rates per device of the group)" if device.parallel is not None else ""
    click.echo(f"{model.name} ({model.weight_dtype}) on {device.name}{priced}{each}: achieved (peak x efficiency) "
               f"{first['achieved_flops_per_s']:.3g} FLOP/s and {first['achieved_bandwidth_bytes_per_s']:.3g} B/s; "
               f"compute knee at n* = {first['knee_tokens']:.1f} tokens")
    click.echo("n: new tokens per forward, c: tokens already in the KV cache, b: sequences in the batch")
    emit_table(rows, ["n", "c", "b", "time (ms)", "n·b/time (tok/s)", "bound", "FLOPs", "bytes", "fits"])
    emit_warnings(warnings)



