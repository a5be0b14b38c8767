"""Commands of the reference decoder (issue 6, in progress): reference generate, reference bench."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import click
import numpy as np

from dfvg_dse.cli._base import catalog_of, cli, emit_json, emit_table
from dfvg_dse.export import write_jsonl, write_records
from dfvg_dse.reference import Model, ReferenceConfig, generate_ar, generate_speculative, greedy_agreement
from dfvg_dse.specs import InputError
from dfvg_dse.tree import parse_tree_spec


def _load(ctx, folder: str, role: str) -> tuple[Model, bool]:
    """The model, and whether its tokens are bytes (a 256-token vocabulary without tokenizer.json)."""
    config, spec, tensors, path = catalog_of(ctx).read_checkpoint(folder, role)
    model = Model(tensors, ReferenceConfig(spec, rope_theta=float(config.get("rope_theta", 10000.0)),
                                           rms_norm_eps=float(config.get("rms_norm_eps", 1e-6))))
    return model, spec.vocab_size == 256 and not (path / "tokenizer.json").exists()


def _prompt_tokens(prompt: str | None, prompt_ids: str | None, byte_level: bool) -> list[int]:
    if (prompt is None) == (prompt_ids is None):
        raise InputError("give exactly one of --prompt TEXT and --prompt-ids 1,2,3")
    if prompt is not None:
        if not byte_level:
            # TODO(#6): tokenizer.json through the optional `tokenizers` package
            raise InputError("--prompt: this checkpoint is not byte-level; pass --prompt-ids")
        return list(prompt.encode("utf-8"))
    try:
        return [int(x) for x in prompt_ids.split(",")]
    except ValueError:
        raise InputError(f"--prompt-ids {prompt_ids!r}: expected integers like 1,2,3") from None


@cli.group()
def reference() -> None:
    """The reference decoder: a small numpy model that really drafts and verifies."""


@reference.command("generate")
@click.option("--target", default="builtin:tiny", show_default=True,
              help="Target checkpoint folder, or builtin:tiny (the shipped pair).")
@click.option("--draft", help="Draft checkpoint folder or builtin:tiny [default: builtin:tiny with a builtin target].")
@click.option("--prompt", help="Prompt text (byte-level checkpoints).")
@click.option("--prompt-ids", help="Prompt token ids: 1,2,3.")
@click.option("--max-new-tokens", type=click.IntRange(1, 100000), default=32, show_default=True)
@click.option("--mode", type=click.Choice(["ar", "spec"]), default="spec", show_default=True)
@click.option("--tree", "tree_spec", default="chain:4", show_default=True, help="Static tree SPEC for --mode spec.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="Write one JSONL line per round (docs/trace-format.md; --mode spec).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def reference_generate(ctx, target, draft, prompt, prompt_ids, max_new_tokens, mode, tree_spec, trace_path, as_json):
    """Greedy decoding, autoregressive or speculative with a static tree (lossless)."""
    target_model, byte_level = _load(ctx, target, "target")
    prompt = _prompt_tokens(prompt, prompt_ids, byte_level)
    vocab = target_model.config.spec.vocab_size
    if any(not 0 <= t < vocab for t in prompt):
        raise InputError(f"--prompt-ids: every id must be in 0..{vocab - 1}")
    if trace_path and mode != "spec":
        raise InputError("--trace: only --mode spec has rounds to trace")
    trace: list[dict] = []
    start = time.perf_counter()
    counts = None
    if mode == "ar":
        tokens = generate_ar(target_model, prompt, max_new_tokens)
    else:
        draft = draft or ("builtin:tiny" if target.startswith("builtin:") else None)
        if not draft:
            raise InputError("--draft is required with --mode spec")
        draft_model, _ = _load(ctx, draft, "draft")
        if draft_model.config.spec.vocab_size != vocab:
            raise InputError("--draft: its vocabulary differs from the target's")
        tree = parse_tree_spec(tree_spec)
        tokens, counts = generate_speculative(target_model, draft_model, prompt, max_new_tokens,
                                              list(tree.parents), list(tree.ranks), trace)
    seconds = time.perf_counter() - start
    record = {"tokens": tokens, "text": bytes(tokens).decode("utf-8", "replace") if byte_level else None,
              "tokens_per_s": len(tokens) / seconds, "mode": mode}
    if counts is not None:
        rounds = int(counts.sum())
        record.update({"rounds": rounds, "accept_counts": counts.tolist(),
                       "mean_accepted_per_round": float(np.dot(np.arange(len(counts)), counts) / max(rounds, 1))})
    if trace_path:
        record["trace"] = str(write_jsonl(Path(trace_path), trace))
    if as_json:
        emit_json(record)
    else:
        click.echo(record["text"] if byte_level else " ".join(map(str, tokens)))
        extra = f", {record['mean_accepted_per_round']:.2f} draft tokens accepted per round" if counts is not None else ""
        click.echo(f"{len(tokens)} tokens in {seconds:.3f} s ({record['tokens_per_s']:.1f} tokens/s{extra})", err=True)


def _fresh(model: Model) -> Model:
    return Model(model.weights, model.config)


@reference.command("bench")
@click.option("--target", default="builtin:tiny", show_default=True, help="Target checkpoint folder or builtin:tiny.")
@click.option("--draft", default="builtin:tiny", show_default=True, help="Draft checkpoint folder or builtin:tiny.")
@click.option("--prompts", "prompts_path", type=click.Path(dir_okay=False),
              help="Prompt set (JSONL with text) [default: the shipped held-out prompts].")
@click.option("--count", type=click.IntRange(1, 1000), default=4, show_default=True, help="Prompts used.")
@click.option("--max-new-tokens", type=click.IntRange(1, 100000), default=128, show_default=True)
@click.option("--trees", default="chain:2,chain:4,chain:6,kary:2x2", show_default=True,
              help="Comma-separated static tree SPECs to compare with autoregressive decoding.")
@click.option("--repeats", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="results/reference-bench.csv",
              show_default=True, help="Table to write (CSV).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def reference_bench(ctx, target, draft, prompts_path, count, max_new_tokens, trees, repeats, output, as_json):
    """Tokens/s of autoregressive and speculative greedy decoding on a prompt set, end to end.

    Runs alternate (AR, then every tree, per prompt and repeat) because this machine's speed drifts;
    each row reports medians over prompts x repeats and the speedup over AR of the same loop."""
    catalog = catalog_of(ctx)
    prompts = [list(p["text"].encode("utf-8")) for p in
               catalog.read_reference_prompts(prompts_path, None if prompts_path else "held-out")[:count]]
    target_model, byte_level = _load(ctx, target, "target")
    draft_model, _ = _load(ctx, draft, "draft")
    if not byte_level:
        raise InputError("reference bench: prompts are text; the target must be byte-level")
    shapes = {spec: parse_tree_spec(spec) for spec in trees.split(",")}
    rates: dict[str, list[float]] = {"ar": [], **{spec: [] for spec in shapes}}
    accepted: dict[str, list[float]] = {spec: [] for spec in shapes}
    generate_ar(_fresh(target_model), prompts[0], 8)  # warm-up: first calls pay for allocation
    for _ in range(repeats):
        for prompt in prompts:
            start = time.perf_counter()
            generate_ar(_fresh(target_model), prompt, max_new_tokens)
            rates["ar"].append(max_new_tokens / (time.perf_counter() - start))
            for spec, tree in shapes.items():
                start = time.perf_counter()
                _, counts = generate_speculative(_fresh(target_model), _fresh(draft_model), prompt, max_new_tokens,
                                                 list(tree.parents), list(tree.ranks))
                rates[spec].append(max_new_tokens / (time.perf_counter() - start))
                accepted[spec].append(float(np.dot(np.arange(len(counts)), counts) / counts.sum()))
    agree = [greedy_agreement(_fresh(target_model), _fresh(draft_model), p, max_new_tokens) for p in prompts]
    agreement = sum(a for a, _ in agree) / sum(n for _, n in agree)
    ar_rate = statistics.median(rates["ar"])
    rows = [{"mode": "ar", "tree": "", "tokens_per_s": ar_rate, "speedup": 1.0, "mean_accepted_per_round": 0.0}]
    for spec in shapes:
        rows.append({"mode": "spec", "tree": spec, "tokens_per_s": statistics.median(rates[spec]),
                     "speedup": statistics.median(rates[spec]) / ar_rate,
                     "mean_accepted_per_round": statistics.mean(accepted[spec])})
    written = write_records(Path(output), rows)
    record = {"rows": rows, "greedy_token_acceptance": agreement, "prompts": len(prompts),
              "max_new_tokens": max_new_tokens, "repeats": repeats, "written": [str(p) for p in written]}
    if as_json:
        emit_json(record)
        return
    emit_table([[r["mode"], r["tree"], f"{r['tokens_per_s']:.1f}", f"{r['speedup']:.2f}x",
                 f"{r['mean_accepted_per_round']:.2f}"] for r in rows],
               ["mode", "tree", "tokens/s", "speedup", "accepted/round"])
    click.echo(f"greedy token acceptance {agreement:.3f} over {len(prompts)} prompts; wrote {written[0]}")
