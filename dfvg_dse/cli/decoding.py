"""Commands on acceptance and token trees: tree expected|optimize|show|dynamic, acceptance list|show|fit."""

from __future__ import annotations

from pathlib import Path

import click

from dfvg_dse.acceptance import (AdaptRule, DuoRule, Eagle2Rule, acceptance_warnings, check_round, fit_profile, greedy_acceptance,
                                 sequoia_acceptance, sequoia_output, simulate_adapt, simulate_duodecoding,
                                 simulate_eagle2, single_token_acceptance, specinfer_acceptance, specinfer_output)
from dfvg_dse.acceptance.calibrate import MAX_BOOTSTRAP, MAX_BOOTSTRAP_DRAWS
from dfvg_dse.acceptance.dynamic import MAX_DUO_GAMMA, MAX_EAGLE2_TOP_K
from dfvg_dse.cli._base import (SEED, FiniteFloatRange, Temperature, catalog_of, cli, emit_json, emit_table,
                                emit_warnings, refuse_other_rules)
from dfvg_dse.files import check_output_path, path_text
from dfvg_dse.report import dynamic_record, profile_record, tree_record
from dfvg_dse.catalog import UnknownNameError
from dfvg_dse.specs import InputError, TreeSpec
from dfvg_dse.specs.measurements import METHOD_DRAFTERS
from dfvg_dse.tree import draw_tree, from_document, optimal_tree, parse_tree_spec
from dfvg_dse.tree.from_tau import profile_from_tau, published_profile, published_profile_name

ACCEPTANCE_HELP = "0.8 (i.i.d. alpha), 0.63,0.11,0.06 (rank vector), pair:NAME (see `acceptance list`) or a file."
TREE_HELP = ("chain:G, seq:KxL, kary:KxD, choices:[[0],[1],[0,0]], vllm:[(0,),(0,0)], parents:-1,0,1, "
             "published:NAME or a JSON/TOML file with parents or choices.")


def _tree(ctx: click.Context, spec: str) -> TreeSpec:
    catalog = catalog_of(ctx)
    path = catalog.tree_file(spec)  # errors about a file's tree name the file
    return parse_tree_spec(spec) if path is None else from_document(catalog.tree_document(spec), str(path))


@cli.group()
def tree() -> None:
    """Token trees: expected tokens, optimal trees, drawings, dynamic drafting."""


@tree.command("expected")
@click.option("--acceptance", "acceptance_spec", required=True, help=ACCEPTANCE_HELP)
@click.option("--tree", "tree_spec", required=True, help=TREE_HELP)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def tree_expected(ctx: click.Context, acceptance_spec: str, tree_spec: str, as_json: bool) -> None:
    """Expected tokens per round F(T) of a static tree (bonus token included)."""
    record = tree_record(_tree(ctx, tree_spec), catalog_of(ctx).acceptance(acceptance_spec))
    if as_json:
        emit_json({k: record[k] for k in ("expected_tokens", "nodes", "depth", "budget", "level_widths", "warnings")})
        return
    emit_warnings(record["warnings"])
    click.echo(f"F(T) = {record['expected_tokens']:.4f} tokens per round ({record['budget']} draft tokens, "
               f"depth {record['depth']}, {record['nodes']} nodes with the root)")


@tree.command("optimize")
@click.option("--acceptance", "acceptance_spec", required=True, help=ACCEPTANCE_HELP)
@click.option("--budget", type=click.IntRange(1, 4096), required=True, help="Draft tokens (nodes without the root).")
@click.option("--max-depth", type=click.IntRange(1, 4096), help="Levels below the root [default: min(budget, 64)].")
@click.option("--max-width", type=click.IntRange(1, 4096), help="Per-level cap k_max (an FPGA's lanes).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def tree_optimize(ctx: click.Context, acceptance_spec: str, budget: int, max_depth: int | None,
                  max_width: int | None, as_json: bool) -> None:
    """The tree maximising F(T) under a budget, a depth limit and a width cap (Sequoia DP + caps)."""
    profile = catalog_of(ctx).acceptance(acceptance_spec)
    result = optimal_tree(profile, budget, max_depth or min(budget, 64), max_width)
    record = tree_record(result.tree, profile)
    record["method"] = result.method
    if as_json:
        emit_json(record)
        return
    emit_warnings(record["warnings"])
    click.echo(f"best F(T) = {record['expected_tokens']:.4f} with {record['budget']} draft tokens, depth "
               f"{record['depth']}, widths {record['level_widths']} ({result.method})")
    click.echo(f"choices: {record['choices']}")
    click.echo(f"vLLM speculative_token_tree: {record['vllm_speculative_token_tree']}")


@tree.command("show")
@click.option("--tree", "tree_spec", required=True, help=TREE_HELP)
@click.option("--acceptance", "acceptance_spec", help="Annotate each node with its acceptance. " + ACCEPTANCE_HELP)
@click.pass_context
def tree_show(ctx: click.Context, tree_spec: str, acceptance_spec: str | None) -> None:
    """Draw a tree in the terminal (rank r<k> = the draft's k-th choice; f = P(path accepted))."""
    spec = _tree(ctx, tree_spec)
    profile = catalog_of(ctx).acceptance(acceptance_spec) if acceptance_spec else None
    for line in draw_tree(spec, profile):
        click.echo(line)
    if profile is not None:
        emit_warnings(acceptance_warnings(profile, spec))


# The options each rule of `tree dynamic` reads.
_RULE_OPTIONS = {"adapt": ("threshold", "temperature", "k_max", "budget", "min_depth", "max_depth"),
                 "eagle2": ("top_k", "depth", "total_tokens"), "duodecoding": ("gamma",)}


@tree.command("dynamic")
@click.option("--acceptance", "acceptance_spec", required=True, help=ACCEPTANCE_HELP)
@click.option("--rule", type=click.Choice(["adapt", "eagle2", "duodecoding"]), default="adapt", show_default=True)
@click.option("--threshold", type=FiniteFloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="adapt: tau, keep children with confidence above it.")
@click.option("--temperature", type=Temperature(), default=0.0, show_default=True,
              help="adapt: Gumbel top-k temperature T (0 = top-k).")
@click.option("--k-max", type=click.IntRange(1, 1024), default=8, show_default=True, help="adapt: per-level cap.")
@click.option("--budget", type=click.IntRange(1, 4096), default=32, show_default=True, help="adapt: draft tokens B.")
@click.option("--min-depth", type=click.IntRange(1, 256), default=1, show_default=True, help="adapt: D_min.")
@click.option("--max-depth", type=click.IntRange(1, 256), default=16, show_default=True, help="adapt: depth limit.")
@click.option("--top-k", type=click.IntRange(1, MAX_EAGLE2_TOP_K), default=10, show_default=True, help="eagle2: top_k.")
@click.option("--depth", type=click.IntRange(1, 64), default=6, show_default=True, help="eagle2: expansion steps.")
@click.option("--total-tokens", type=click.IntRange(2, 4096), default=60, show_default=True,
              help="eagle2: verified tokens including the root.")
@click.option("--gamma", type=click.IntRange(1, MAX_DUO_GAMMA), default=24, show_default=True,
              help="duodecoding: draft tokens per round.")
@click.option("--rounds", type=click.IntRange(100, 10**6), default=20000, show_default=True,
              help="Monte Carlo rounds.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def tree_dynamic(ctx: click.Context, acceptance_spec: str, rule: str, threshold: float, temperature: float,
                 k_max: int, budget: int, min_depth: int, max_depth: int, top_k: int, depth: int, total_tokens: int,
                 gamma: int, rounds: int, seed: int, as_json: bool) -> None:
    """Expected tokens, nodes per level and depth of a dynamic drafting rule (ADAPT, EAGLE-2, DuoDecoding)."""
    refuse_other_rules(ctx, _RULE_OPTIONS, rule, f"--rule {rule}")
    profile = catalog_of(ctx).acceptance(acceptance_spec)
    if rule == "adapt":
        estimate = simulate_adapt(profile, AdaptRule(threshold, temperature, k_max, budget, min_depth, max_depth),
                                  rounds, seed)
    elif rule == "eagle2":
        estimate = simulate_eagle2(profile, Eagle2Rule(top_k, depth, total_tokens), rounds, seed)
    else:
        estimate = simulate_duodecoding(profile, DuoRule(gamma), rounds, seed)
    record = dynamic_record(estimate, rule)
    if as_json:
        emit_json(record)
        return
    click.echo(f"{rule}: F = {record['expected_tokens']:.4f} +- {record['standard_error']:.4f} tokens per round "
               f"({record['method']}, {record['rounds']} rounds); direct simulation "
               f"{record['simulated_tokens']:.4f} +- {record['simulated_standard_error']:.4f}")
    click.echo(f"draft tokens per round {record['expected_nodes']:.2f}, depth {record['expected_depth']:.2f}, "
               f"per level {[round(x, 2) for x in record['nodes_per_level']]}")


@cli.group()
def acceptance() -> None:
    """Acceptance profiles: shipped pairs, and fits from decoding traces."""


@acceptance.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON list on stdout.")
@click.pass_context
def acceptance_list(ctx: click.Context, as_json: bool) -> None:
    """Shipped and user acceptance profiles (use as --acceptance pair:NAME)."""
    catalog = catalog_of(ctx)
    records = [profile_record(catalog.profile(n), catalog.profile_document(n)) for n in catalog.profile_names()]
    if as_json:
        emit_json(records)
        return
    emit_table([[r["name"], f"{r['rank_probs'][0]:.3f}", len(r["rank_probs"]), r["tag"],
                 "yes" if r["confidence"] else "no", _published_text(r["published"])] for r in records],
               ["name", "p_1", "ranks", "tag", "confidence model", "from tau (tokens/depth)"])


def _published_text(published: dict | None) -> str:
    return "" if published is None else \
        f"{published['mean_accepted_tokens']:g} ({published['tree_tokens']}/{published['tree_depth']})"


@acceptance.command("show")
@click.argument("profile")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def acceptance_show(ctx: click.Context, profile: str, as_json: bool) -> None:
    """One profile (a name from `acceptance list`, pair:NAME or a file): rank vector, depth x rank, confidences."""
    catalog = catalog_of(ctx)
    name = profile[5:] if profile.startswith("pair:") else profile
    document = catalog.profile_document(name) if name in catalog.profile_names() or catalog.is_file(profile) \
        else {"path": profile}
    spec = catalog.profile(name) if name in catalog.profile_names() else catalog.acceptance(profile)
    record = profile_record(spec, document)
    if as_json:
        emit_json(record)
        return
    click.echo(f"{record['name']} [{record['tag']}] {record.get('path', '')}")
    click.echo(f"source: {record['source']}")
    click.echo(f"rank vector p_1..: {[round(x, 4) for x in record['rank_probs']]} (sum {sum(record['rank_probs']):.4f})")
    if record.get("ci_low"):
        click.echo(f"95% bootstrap interval: {[round(x, 4) for x in record['ci_low']]} .. "
                   f"{[round(x, 4) for x in record['ci_high']]}")
    for d, row in enumerate(record["depth_rank"] or []):
        click.echo(f"depth {d + 1}: {[round(x, 4) for x in row]}")
    if record["confidence"]:
        c = record["confidence"]
        click.echo(f"confidence: top-1 mean by depth {[round(x, 3) for x in c['top1_mean']]}, Beta concentration "
                   f"{c['concentration']:.3g}; implied p_r {[round(x, 4) for x in c['implied_rank_probs'][:6]]}")
    if record["trace"]:
        t = record["trace"]
        users = ("static trees and ADAPT" if t["adapt"] else "static trees") if t["kind"] == "greedy" else "chains"
        click.echo(f"trace: {t['runs']} {t['kind']} runs of {t['run_tokens']} tokens ({users} replay it instead of "
                   "the statistics above)")


@acceptance.command("fit")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Profile file to write (TOML).")
@click.option("--name", help="Profile name [default: the trace file's stem].")
@click.option("--source", help="Where the trace comes from [default: the trace path].")
@click.option("--bootstrap", type=click.IntRange(0, MAX_BOOTSTRAP), default=1000, show_default=True,
              help=f"Bootstrap resamples of whole rounds for the intervals (resamples x rounds at most "
                   f"{MAX_BOOTSTRAP_DRAWS:.0e}).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def acceptance_fit(ctx: click.Context, trace: str, output: str, name: str | None, source: str | None, bootstrap: int,
                   seed: int, force: bool, as_json: bool) -> None:
    """Fit a rank vector, a depth x rank matrix and a confidence model from a JSONL trace."""
    catalog = catalog_of(ctx)
    check_output_path(output, "--output")  # before the fit and its bootstrap, not after them
    rounds = [check_round(raw, line) for line, raw in catalog.read_trace(trace)]
    result = fit_profile(rounds, name or click.format_filename(trace).rsplit("/", 1)[-1].rsplit(".", 1)[0],
                         source or f"fitted from {path_text(trace)}", bootstrap=max(bootstrap, 1), seed=seed)
    meta = {"tag": "measured", "fit": {"rounds": result.rounds, "bootstrap": bootstrap, "seed": seed,
                                       "mean_accepted_tokens": result.accepted_tokens_mean},
            "ci": (result.ci_low.tolist(), result.ci_high.tolist())}
    path = catalog.write_profile(output, result.profile, meta, force)
    record = {**profile_record(result.profile, {"path": str(path), "tag": "measured"}), "rounds": result.rounds,
              "ci_low": result.ci_low.tolist(), "ci_high": result.ci_high.tolist()}
    if as_json:
        emit_json(record)
    else:
        click.echo(f"wrote {path}: {result.rounds} rounds, p_1 = {record['rank_probs'][0]:.4f} "
                   f"[{record['ci_low'][0]:.4f}, {record['ci_high'][0]:.4f}]")


FROM_TAU_MODES = {"one": ("tau", "tree_tokens", "tree_depth", "name", "output", "source"),
                  "measurements": ("source_id", "methods", "out_dir")}


def _published_profiles(catalog, source_id: str, methods: tuple[str, ...], out_dir: str) -> list:
    """(path, profile, meta) of every row of one speculative measurement file drafted by a head or a
    lookup (or by `methods`), names made unique by the row number; computed before any is written."""
    sources = {s.id: s for s in catalog.measurements("speculative")}
    if source_id not in sources:
        raise UnknownNameError("speculative measurement file", source_id, sorted(sources))
    source, taken, out = sources[source_id], set(), []
    rows = [(i, r) for i, r in enumerate(source.rows, 1)
            if (r.method in methods if methods else METHOD_DRAFTERS[r.method] != "model")]
    if not rows:
        raise InputError(f"--measurements {source_id}: no row drafted by " + (", ".join(methods) if methods else
                         "a head or a lookup") + f"; its methods: {', '.join(sorted({r.method for r in source.rows}))}")
    for index, row in rows:
        name = published_profile_name(source.id, row)
        name = f"{name}/row{index}" if name in taken else name
        taken.add(name)
        profile, meta = published_profile(source, row, name)
        out.append((Path(out_dir) / (name.replace("/", "__") + ".toml"), profile, meta))
    return out


@acceptance.command("from-tau")
@click.option("--tau", type=FiniteFloatRange(min=1.0, min_open=True), help="Published mean accepted tokens a round, bonus included.")
@click.option("--tree-tokens", type=click.IntRange(1), help="Draft tokens a round of the published tree (chain: its length).")
@click.option("--tree-depth", type=click.IntRange(1), help="Levels of the published tree (chain: its length).")
@click.option("--name", help="Profile name (with --tau).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Profile file to write (with --tau).")
@click.option("--source", help="Where tau was published (with --tau): paper, table, URL.")
@click.option("--measurements", "source_id", help="A speculative file of hwdb/measurements: one profile per row.")
@click.option("--method", "methods", multiple=True, help="Rows of these methods only [default: heads and lookups].")
@click.option("--out-dir", type=click.Path(file_okay=False), help="Folder for the profiles (with --measurements).")
@click.option("--force", is_flag=True, help="Replace existing files.")
@click.option("--json", "as_json", is_flag=True, help="One JSON list on stdout.")
@click.pass_context
def acceptance_from_tau(ctx: click.Context, tau, tree_tokens, tree_depth, name, output, source, source_id, methods,
                        out_dir, force: bool, as_json: bool) -> None:
    """Profiles that reproduce a published mean accepted length at its tree (docs/acceptance-and-trees.md)."""
    catalog = catalog_of(ctx)
    mode = "measurements" if source_id is not None else "one"
    refuse_other_rules(ctx, FROM_TAU_MODES, mode, "--measurements" if source_id is not None else "--tau")
    needed = [o for o, v in (("--out-dir", out_dir),) if v is None] if source_id is not None else \
        [o for o, v in (("--tau", tau), ("--tree-tokens", tree_tokens), ("--tree-depth", tree_depth),
                        ("--name", name), ("--output", output)) if v is None]
    if needed:
        raise InputError(f"acceptance from-tau: missing {', '.join(needed)}"
                         + ("" if source_id is not None else " (or give --measurements ID --out-dir DIR)"))
    if source_id is not None:
        planned = _published_profiles(catalog, source_id, methods, out_dir)
    else:
        check_output_path(output, "--output")
        text = source or f"--tau {tau:g} at {tree_tokens} draft tokens, depth {tree_depth} (command line)"
        fit = {"method": "from-tau", "mean_accepted_tokens": tau, "tree_tokens": tree_tokens, "tree_depth": tree_depth}
        planned = [(Path(output), profile_from_tau(name, tau, tree_tokens, tree_depth, text),
                    {"tag": "derived", "fit": fit})]
    clash = [str(p) for p, _, _ in planned if p.exists()] if not force else []
    if clash:
        raise InputError(f"{clash[0]}: already exists" + (f" (and {len(clash) - 1} more)" if len(clash) > 1 else "")
                         + "; pass --force to replace")
    Path(planned[0][0]).parent.mkdir(parents=True, exist_ok=True)
    records = [{**profile_record(p, {"path": str(catalog.write_profile(path, p, meta, True)), "tag": "derived"}),
                "mean_accepted_tokens": meta["fit"]["mean_accepted_tokens"]} for path, p, meta in planned]
    if as_json:
        emit_json(records)
        return
    for r in records:
        click.echo(f"wrote {r['path']}: tau {r['mean_accepted_tokens']:g}, p_1 = {r['rank_probs'][0]:.4f}, "
                   f"{len(r['rank_probs'])} rank(s)")


def _distribution(text: str, name: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"{name} {text!r}: expected probabilities like 0.4,0.3,0.3") from None
    if any(not 0 <= v <= 1 for v in values) or abs(sum(values) - 1) > 1e-6 or len(values) > 12:
        raise InputError(f"{name} {text!r}: needs at most 12 probabilities in [0, 1] summing to 1")
    return values


@acceptance.command("verify")
@click.option("--target-probs", required=True, help="Target distribution P over a small vocabulary: 0.4,0.3,0.2,0.1.")
@click.option("--draft-probs", required=True, help="Draft distribution Q over the same tokens.")
@click.option("--candidates", type=click.IntRange(1, 12), default=1, show_default=True, help="Draft candidates k.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def acceptance_verify(target_probs: str, draft_probs: str, candidates: int, as_json: bool) -> None:
    """Exact per-candidate acceptance p_k of greedy, SpecInfer and Sequoia verification for P and Q,
    and the largest deviation of each rule's output distribution from P (0 = lossless)."""
    p, q = _distribution(target_probs, "--target-probs"), _distribution(draft_probs, "--draft-probs")
    if len(p) != len(q):
        raise InputError("--target-probs and --draft-probs need the same number of tokens")
    k = min(candidates, len(q))
    record = {"single_token_acceptance": single_token_acceptance(p, q), "candidates": k, "rules": {
        "greedy": {"p_k": greedy_acceptance(p, q, k).tolist()},
        "specinfer": {"p_k": specinfer_acceptance(p, q, k).tolist(),
                      "output_max_error": float(max(abs(a - b) for a, b in zip(specinfer_output(p, q, k), p)))},
        "sequoia": {"p_k": sequoia_acceptance(p, q, k).tolist(),
                    "output_max_error": float(max(abs(a - b) for a, b in zip(sequoia_output(p, q, k), p)))}}}
    for rule in record["rules"].values():
        rule["total"] = sum(rule["p_k"])
    if as_json:
        emit_json(record)
        return
    click.echo(f"single-token acceptance sum min(P, Q) = {record['single_token_acceptance']:.6f}")
    emit_table([[name, ", ".join(f"{x:.6f}" for x in r["p_k"]), f"{r['total']:.6f}",
                 f"{r['output_max_error']:.1e}" if "output_max_error" in r else "(deterministic)"]
                for name, r in record["rules"].items()], ["rule", "p_k", "total", "|output - P|"])
