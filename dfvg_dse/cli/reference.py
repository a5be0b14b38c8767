"""Commands of the reference decoder (issue 6, in progress): reference generate."""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np

from dfvg_dse.cli._base import catalog_of, cli, emit_json
from dfvg_dse.export import write_jsonl
from dfvg_dse.reference import Model, ReferenceConfig, generate_ar, generate_speculative
from dfvg_dse.specs import InputError
from dfvg_dse.tree import parse_tree_spec


def _load(ctx, folder: str) -> Model:
    config, spec, tensors = catalog_of(ctx).read_checkpoint(folder)
    return Model(tensors, ReferenceConfig(spec, rope_theta=float(config.get("rope_theta", 10000.0)),
                                          rms_norm_eps=float(config.get("rms_norm_eps", 1e-6))))


@cli.group()
def reference() -> None:
    """The reference decoder: a small numpy model that really drafts and verifies."""


@reference.command("generate")
@click.option("--target", required=True, type=click.Path(file_okay=False), help="Target checkpoint folder.")
@click.option("--draft", type=click.Path(file_okay=False), help="Draft checkpoint folder (--mode spec).")
@click.option("--prompt-ids", required=True, help="Prompt token ids: 1,2,3.")
@click.option("--max-new-tokens", type=click.IntRange(1, 100000), default=32, show_default=True)
@click.option("--mode", type=click.Choice(["ar", "spec"]), default="spec", show_default=True)
@click.option("--tree", "tree_spec", default="chain:4", show_default=True, help="Static tree SPEC for --mode spec.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="Write one JSONL line per round (docs/trace-format.md; --mode spec).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def reference_generate(ctx, target, draft, prompt_ids, max_new_tokens, mode, tree_spec, trace_path, as_json):
    """Greedy decoding, autoregressive or speculative with a static tree (lossless)."""
    try:
        prompt = [int(x) for x in prompt_ids.split(",")]
    except ValueError:
        raise InputError(f"--prompt-ids {prompt_ids!r}: expected integers like 1,2,3") from None
    target_model = _load(ctx, target)
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
        if not draft:
            raise InputError("--draft is required with --mode spec")
        draft_model = _load(ctx, draft)
        if draft_model.config.spec.vocab_size != vocab:
            raise InputError("--draft: its vocabulary differs from the target's")
        tree = parse_tree_spec(tree_spec)
        tokens, counts = generate_speculative(target_model, draft_model, prompt, max_new_tokens,
                                              list(tree.parents), list(tree.ranks), trace)
    seconds = time.perf_counter() - start
    record = {"tokens": tokens, "tokens_per_s": len(tokens) / seconds, "mode": mode}
    if counts is not None:
        rounds = int(counts.sum())
        record.update({"rounds": rounds, "accept_counts": counts.tolist(),
                       "mean_accepted_per_round": float(np.dot(np.arange(len(counts)), counts) / max(rounds, 1))})
    if trace_path:
        record["trace"] = str(write_jsonl(Path(trace_path), trace))
    if as_json:
        emit_json(record)
    else:
        click.echo(" ".join(map(str, tokens)))
        extra = f", {record['mean_accepted_per_round']:.2f} draft tokens accepted per round" if counts is not None else ""
        click.echo(f"{len(tokens)} tokens in {seconds:.3f} s ({record['tokens_per_s']:.1f} tokens/s{extra})", err=True)
