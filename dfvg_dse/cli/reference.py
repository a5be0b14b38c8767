"""Commands of the reference decoder (issue 6): reference generate, reference bench.

Decoding runs in stage processes (stages.py): the verifier alone for autoregressive decoding, the
drafter and the verifier joined by a pipe (optionally an emulated hwdb link) for speculative."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import click
import numpy as np

from dfvg_dse.catalog.checkpoints import forward_settings
from dfvg_dse.catalog.lookup import BUILTIN_PAIRS
from dfvg_dse.cli._base import (SEED, FiniteFloatRange, Temperature, catalog_of, cli, emit_json, emit_table,
                                progress_line, refuse_other_rules, refuse_unused)
from dfvg_dse.cli.decoding import _tree
from dfvg_dse.export import write_jsonl, write_records
from dfvg_dse.files import check_output_path
from dfvg_dse.reference import Model, ReferenceConfig, Sampling, greedy_agreement
from dfvg_dse.reference.speculative import load_model
from dfvg_dse.reference.eagle import HeadModel, pack_head
from dfvg_dse.reference.sampling import VERIFICATIONS
from dfvg_dse.reference.stages import HEAD_IN_TURN, SCHEDULES, Job, LinkEmulation, RunResult, StageError, TwoStageRuntime
from dfvg_dse.specs import InputError
from dfvg_dse.specs.backend import BACKEND_DTYPES, BACKENDS, NUMPY, ReferenceBackend, pair_label, stage_backends
from dfvg_dse.specs.decoding import AdaptRule, Eagle2Rule


class StageFailure(click.ClickException):
    """A stage process failed: one line, exit code 1 (not the user's input)."""

    exit_code = 1


class _Text:
    """Text <-> token ids: the checkpoint's tokenizer.json, else bytes for a 256-token vocabulary."""

    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8")) if self.tokenizer is None else self.tokenizer.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", "replace") if self.tokenizer is None else self.tokenizer.decode(ids)


def _load(ctx, folder: str, role: str, backend: ReferenceBackend = NUMPY) -> tuple[Model, _Text | None]:
    """The model on `backend` and its text codec (None: neither a tokenizer.json nor a byte vocabulary)."""
    catalog = catalog_of(ctx)
    config, spec, tensors, path = catalog.read_checkpoint(folder, role)
    rope, rms_norm_eps = forward_settings(path, config, spec)
    model = load_model(tensors, ReferenceConfig(spec, rope=rope, rms_norm_eps=rms_norm_eps), backend)
    tokenizer = catalog.read_tokenizer(path)
    if tokenizer is not None:
        return model, _Text(tokenizer)
    return model, _Text() if spec.vocab_size == 256 else None


def _load_head(ctx, folder: str, target: Model) -> HeadModel:
    """An EAGLE-style draft head beside its target (it shares the target's embedding and LM head)."""
    config, spec, tensors, path = catalog_of(ctx).read_head(folder)
    rope, rms_norm_eps = forward_settings(path, config, spec)
    head_config = ReferenceConfig(spec, rope=rope, rms_norm_eps=rms_norm_eps)
    if spec.d_model != target.config.spec.d_model or spec.vocab_size != target.config.spec.vocab_size:
        raise InputError(f"--draft {folder}: a head of width {spec.d_model} and vocabulary {spec.vocab_size} for a "
                         f"target of {target.config.spec.d_model} and {target.config.spec.vocab_size}")
    packed = getattr(target.weights, "packed", target.weights)  # a torch target's numpy weights
    return HeadModel(pack_head(tensors, head_config, packed), head_config)


def _load_pair(ctx, target: str, draft: str | None, backend: ReferenceBackend = NUMPY,
               draft_backend: ReferenceBackend | None = None) -> tuple[Model, Model, _Text | None]:
    draft = draft or (target if target in BUILTIN_PAIRS else None)  # a shipped pair's own draft
    if not draft:
        raise InputError("--draft is required for speculative decoding (a folder, or a shipped pair: builtin:tiny, builtin:small)")
    head = catalog_of(ctx).is_head(draft)
    draft_backend = draft_backend or backend
    if head and draft_backend.name != "numpy":
        # TODO(issue 19): a draft head on torch (its fc and features as tensors)
        raise InputError(f"--draft {draft}: a draft head runs on the numpy backend only; add --draft-backend numpy")
    target_model, text = _load(ctx, target, "target", backend)
    draft_model = _load_head(ctx, draft, target_model) if head else _load(ctx, draft, "draft", draft_backend)[0]
    if draft_model.config.spec.vocab_size != target_model.config.spec.vocab_size:
        raise InputError("--draft: its vocabulary differs from the target's")
    return target_model, draft_model, text


def _prompt_tokens(prompt: str | None, prompt_ids: str | None, text: _Text | None) -> list[int]:
    if (prompt is None) == (prompt_ids is None):
        raise InputError("give exactly one of --prompt TEXT and --prompt-ids 1,2,3")
    if prompt is not None:
        if text is None:
            raise InputError("--prompt: this checkpoint has no tokenizer.json and is not byte-level; "
                             "pass --prompt-ids")
        tokens = text.encode(prompt)
        if not tokens:  # the first forward predicts from the prompt's last token; there is no implicit BOS
            raise InputError(f"--prompt {prompt!r}: encodes to no tokens; give at least one character")
        return tokens
    try:
        return [int(x) for x in prompt_ids.split(",")]
    except ValueError:
        raise InputError(f"--prompt-ids {prompt_ids!r}: expected integers like 1,2,3") from None


def _link(ctx, name: str | None) -> tuple[LinkEmulation, str]:
    if name in (None, "none"):
        return LinkEmulation(), "none"
    return LinkEmulation.from_spec(catalog_of(ctx).link(name)), name


def _run(runtime: TwoStageRuntime, job: Job) -> RunResult:
    try:
        return runtime.run(job)
    except StageError as error:
        raise StageFailure(str(error)) from None


# Which engine runs each stage's forwards (issue 19): generate, bench, calibrate and validate alike
BACKEND_OPTIONS = [
    click.option("--backend", type=click.Choice(BACKENDS), default="numpy", show_default=True,
                 help="Engine of both stages' forwards: numpy (float32, the parity reference) or torch."),
    click.option("--dtype", type=click.Choice(sorted({d for v in BACKEND_DTYPES.values() for d in v})),
                 default="float32", show_default=True, help="Weights and activations (bfloat16: --backend torch)."),
    click.option("--torch-device", default="cpu", show_default=True, help="--backend torch: cpu, cuda or cuda:N."),
    click.option("--draft-backend", type=click.Choice(BACKENDS),
                 help="The draft's engine when it differs from the target's (numpy: float32 on the CPU) "
                      "[default: --backend]."),
]


def _decoding_options(command):
    """Options shared by generate and bench: how tokens are sampled, drafted and moved."""
    options = [
        click.option("--temperature", type=Temperature(), default=0.0, show_default=True,
                     help="Sampling temperature (0 = greedy)."),
        click.option("--top-p", type=FiniteFloatRange(0, 1, min_open=True), default=1.0, show_default=True,
                     help="Nucleus sampling: keep the most likely tokens up to this mass."),
        click.option("--verification", type=click.Choice(VERIFICATIONS), default="sequoia", show_default=True,
                     help="Sampled static trees: siblings drawn without (sequoia) or with (specinfer) replacement."),
        click.option("--seed", type=SEED, default=0, show_default=True),
        click.option("--link", "link_name", help="Emulate this hwdb link's latency and bandwidth [default: none]."),
        click.option("--no-pin", is_flag=True, help="Do not pin the two stage processes to separate cores."),
        *BACKEND_OPTIONS,
    ]
    for option in reversed(options):
        command = option(command)
    return command


def backend_options(command):
    """--backend, --dtype, --torch-device and --draft-backend (BACKEND_OPTIONS) on a command."""
    for option in reversed(BACKEND_OPTIONS):
        command = option(command)
    return command


# generate's defaults for --dynamic: small trees, because verifying k tokens here costs ~1 + k/4 tokens
DEFAULT_RULES = {"adapt": AdaptRule(threshold=0.05, temperature=0.0, k_max=4, budget=8, min_depth=2, max_depth=6),
                 "eagle2": Eagle2Rule(top_k=4, depth=4, total_tokens=8)}


def _dynamic_options(command):
    adapt, eagle2 = DEFAULT_RULES["adapt"], DEFAULT_RULES["eagle2"]
    options = [
        click.option("--dynamic", type=click.Choice(["adapt", "eagle2"]), help="Draft dynamic trees instead of --tree."),
        click.option("--threshold", type=FiniteFloatRange(0, 1, max_open=True), default=adapt.threshold,
                     show_default=True, help="adapt: tau, keep children with confidence above it."),
        click.option("--gumbel-temperature", type=Temperature(), default=adapt.temperature, show_default=True,
                     help="adapt: Gumbel top-k temperature (0 = top-k)."),
        click.option("--k-max", type=click.IntRange(1, 64), default=adapt.k_max, show_default=True, help="adapt: per-level cap."),
        click.option("--budget", type=click.IntRange(1, 256), default=adapt.budget, show_default=True,
                     help="adapt: draft tokens per round."),
        click.option("--min-depth", type=click.IntRange(1, 64), default=adapt.min_depth, show_default=True, help="adapt: D_min."),
        click.option("--max-depth", type=click.IntRange(1, 64), default=adapt.max_depth, show_default=True, help="adapt: depth limit."),
        click.option("--top-k", type=click.IntRange(1, 64), default=eagle2.top_k, show_default=True, help="eagle2: top_k."),
        click.option("--depth", type=click.IntRange(1, 64), default=eagle2.depth, show_default=True, help="eagle2: steps."),
        click.option("--total-tokens", type=click.IntRange(2, 512), default=eagle2.total_tokens, show_default=True,
                     help="eagle2: verified tokens including the root."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _dynamic_rule(dynamic, threshold, gumbel_temperature, k_max, budget, min_depth, max_depth, top_k, depth,
                  total_tokens):
    if dynamic == "adapt":
        if min_depth > max_depth:
            raise InputError(f"--min-depth {min_depth}: must be <= --max-depth {max_depth}")
        return AdaptRule(threshold, gumbel_temperature, k_max, budget, min_depth, max_depth)
    return Eagle2Rule(top_k, depth, total_tokens)


@cli.group()
def reference() -> None:
    """The reference decoder: small models (numpy, or torch in bfloat16) that really draft and verify."""


# The drafting options each way of drafting in `reference generate` reads.
_RULE_OPTIONS = {"adapt": ("threshold", "gumbel_temperature", "k_max", "budget", "min_depth", "max_depth"),
                 "eagle2": ("top_k", "depth", "total_tokens"), "tree": ()}


@reference.command("generate")
@click.option("--target", default="builtin:tiny", show_default=True,
              help="Target checkpoint folder, or a shipped pair: builtin:tiny, builtin:small (for --backend torch).")
@click.option("--draft", help="Draft checkpoint folder, builtin:tiny, or a draft head (builtin:tiny-eagle, the shipped "
                   "target's EAGLE-style head, or a head folder) [default: builtin:tiny with a builtin target].")
@click.option("--prompt", help="Prompt text (byte-level checkpoints, or through the folder's tokenizer.json).")
@click.option("--prompt-ids", help="Prompt token ids: 1,2,3.")
@click.option("--max-new-tokens", type=click.IntRange(1, 100000), default=32, show_default=True)
@click.option("--mode", type=click.Choice(["ar", "spec"]), default="spec", show_default=True)
@click.option("--tree", "tree_spec", help="Static tree SPEC for --mode spec [default: chain:4 unless --dynamic].")
@_dynamic_options
@click.option("--schedule", type=click.Choice(SCHEDULES), default="sequential", show_default=True,
              help="overlap: draft the next tree on the predicted verdict while the target verifies.")
@_decoding_options
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="Write one JSONL line per round (docs/trace-format.md; --mode spec).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def reference_generate(ctx, target, draft, prompt, prompt_ids, max_new_tokens, mode, tree_spec, dynamic, threshold,
                       gumbel_temperature, k_max, budget, min_depth, max_depth, top_k, depth, total_tokens, schedule,
                       temperature, top_p, verification, seed, link_name, no_pin, backend, dtype, torch_device,
                       draft_backend, trace_path, as_json):
    """Decode autoregressively or speculatively (lossless) with the draft and verify stages in two processes."""
    backend, draft_backend = stage_backends(backend, dtype, torch_device, draft_backend)
    if mode == "ar":
        refuse_unused(ctx, ["draft", "tree_spec", "dynamic", "threshold", "gumbel_temperature", "k_max", "budget",
                            "min_depth", "max_depth", "top_k", "depth", "total_tokens", "schedule", "verification",
                            "link_name", "trace_path", "draft_backend"],
                      "with --mode ar (autoregressive decoding drafts nothing)")
    if trace_path:
        check_output_path(trace_path, "--trace")  # before the decoding, not after it
    if mode == "spec":
        target_model, draft_model, text = _load_pair(ctx, target, draft, backend, draft_backend)
        if isinstance(draft_model, HeadModel) and schedule == "overlap":
            raise InputError(f"--schedule overlap: {HEAD_IN_TURN}")
    else:
        (target_model, text), draft_model = _load(ctx, target, "target", backend), None
    prompt = _prompt_tokens(prompt, prompt_ids, text)
    vocab = target_model.config.spec.vocab_size
    if any(not 0 <= t < vocab for t in prompt):
        raise InputError(f"{'--prompt-ids' if prompt_ids else '--prompt'}: every token id must be in 0..{vocab - 1}")
    rule = None
    if mode == "spec":
        if dynamic and tree_spec:
            raise InputError("give --tree or --dynamic, not both")
        refuse_other_rules(ctx, _RULE_OPTIONS, dynamic or "tree", f"--dynamic {dynamic}" if dynamic else "a static tree")
        tree_spec = tree_spec or "chain:4"
        if dynamic:
            rule = _dynamic_rule(dynamic, threshold, gumbel_temperature, k_max, budget, min_depth, max_depth, top_k,
                                 depth, total_tokens)
        else:
            tree = _tree(ctx, tree_spec)
            rule = (tuple(tree.parents), tuple(tree.ranks))
    link, link_label = _link(ctx, link_name)
    job = Job(tuple(prompt), max_new_tokens, rule, Sampling(temperature, top_p, verification), seed, schedule,
              trace=bool(trace_path))
    start = time.perf_counter()
    with TwoStageRuntime(target_model, draft_model, link, pin=not no_pin) as runtime:
        startup = time.perf_counter() - start
        result = _run(runtime, job)
    tokens = result.tokens
    record = {"tokens": tokens, "text": text.decode(tokens) if text is not None else None,
              "tokens_per_s": len(tokens) / result.seconds, "seconds": result.seconds, "mode": mode,
              "temperature": temperature, "top_p": top_p, "seed": seed, "link": link_label,
              "pinned": runtime.pinned, "startup_s": startup,
              "backend": pair_label(backend, draft_backend) if mode == "spec" else backend.label}
    if mode == "spec":
        counts = np.asarray(result.accept_counts)
        record.update({"schedule": schedule, "drafting": dynamic or tree_spec, "rounds": result.rounds,
                       "accept_counts": counts.tolist(),
                       "mean_accepted_per_round": float(np.dot(np.arange(len(counts)), counts) / max(result.rounds, 1)),
                       "link_bytes": result.link_bytes, "overlap_hits": result.overlap_hits,
                       "overlap_misses": result.overlap_misses})
    if trace_path:
        record["trace"] = str(write_jsonl(Path(trace_path), result.trace))
    if as_json:
        emit_json(record)
    else:
        click.echo(record["text"] if text is not None else " ".join(map(str, tokens)))
        extra = f", {record['mean_accepted_per_round']:.2f} draft tokens accepted per round" if mode == "spec" else ""
        click.echo(f"{len(tokens)} tokens in {result.seconds:.3f} s ({record['tokens_per_s']:.1f} tokens/s{extra})",
                   err=True)


@reference.command("bench")
@click.option("--target", default="builtin:tiny", show_default=True,
              help="Target checkpoint folder or a shipped pair (builtin:tiny, builtin:small).")
@click.option("--draft", help="Draft checkpoint folder, a shipped pair's draft or a draft head (builtin:tiny-eagle) "
                              "[default: the shipped pair's own draft].")
@click.option("--prompts", "prompts_path", type=click.Path(dir_okay=False),
              help="Prompt set (JSONL with text) [default: the shipped held-out prompts].")
@click.option("--count", type=click.IntRange(1, 1000), default=4, show_default=True, help="Prompts used.")
@click.option("--max-new-tokens", type=click.IntRange(1, 100000), default=128, show_default=True)
@click.option("--trees", default="chain:2,chain:4,chain:6,kary:2x2", show_default=True,
              help="Comma-separated static tree SPECs to compare with autoregressive decoding.")
@click.option("--dynamic", "dynamic_rules", default="", show_default=True,
              help="Comma-separated dynamic rules to add (adapt, eagle2), with generate's default settings.")
@click.option("--schedules", default="sequential,overlap", show_default=True,
              help="Comma-separated schedules to run every tree with (a draft head: sequential only).")
@_decoding_options
@click.option("--repeats", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="results/reference-bench.csv",
              show_default=True, help="Table to write (CSV).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def reference_bench(ctx, target, draft, prompts_path, count, max_new_tokens, trees, dynamic_rules, schedules,
                    temperature, top_p,
                    verification, seed, link_name, no_pin, backend, dtype, torch_device, draft_backend, repeats, output,
                    as_json):
    """Tokens/s of autoregressive and speculative decoding on a prompt set, end to end, two processes.

    Runs alternate (AR, then every tree and schedule, per prompt and repeat) because this machine's
    speed drifts; each row reports medians over prompts x repeats and the ratio of medians to AR.
    With the defaults (4 prompts x 3 repeats x 9 configurations) about half a minute on a 2-core
    machine (measured: 33 s), progress on a terminal's stderr."""
    catalog = catalog_of(ctx)
    backend, draft_backend = stage_backends(backend, dtype, torch_device, draft_backend)
    label = pair_label(backend, draft_backend)
    check_output_path(output, "--output")  # before half a minute of decoding, not after it
    target_model, draft_model, text = _load_pair(ctx, target, draft, backend, draft_backend)
    if text is None:
        raise InputError("reference bench: prompts are text; the target needs a tokenizer.json or a byte vocabulary")
    available = catalog.read_reference_prompts(prompts_path, None if prompts_path else "held-out")
    if count > len(available):
        raise InputError(f"--count {count}: {prompts_path or 'the shipped held-out set'} has {len(available)} prompts; "
                         f"give at most {len(available)}")
    prompts = [tuple(text.encode(p["text"])) for p in available[:count]]
    chosen = [s.strip() for s in schedules.split(",")]
    if not chosen or any(s not in SCHEDULES for s in chosen):
        raise InputError(f"--schedules {schedules!r}: expected a comma-separated subset of {', '.join(SCHEDULES)}")
    if isinstance(draft_model, HeadModel) and "overlap" in chosen:
        if ctx.get_parameter_source("schedules") is click.core.ParameterSource.COMMANDLINE:
            raise InputError(f"--schedule overlap: {HEAD_IN_TURN}")
        chosen = ["sequential"]  # the default's overlap runs do not apply to a head (its help says so)
    configs = {("ar", "", ""): None}
    for spec in [t.strip() for t in trees.split(",") if t.strip()]:
        tree = _tree(ctx, spec)
        for schedule in chosen:
            configs[("spec", spec, schedule)] = ((tuple(tree.parents), tuple(tree.ranks)), schedule)
    for name in [d.strip() for d in dynamic_rules.split(",") if d.strip()]:
        if name not in DEFAULT_RULES:
            raise InputError(f"--dynamic {name!r}: expected adapt or eagle2")
        for schedule in chosen:
            configs[("spec", name, schedule)] = (DEFAULT_RULES[name], schedule)
    sampling = Sampling(temperature, top_p, verification)
    link, link_label = _link(ctx, link_name)
    rates = {key: [] for key in configs}
    accepted = {key: [] for key in configs}
    hits = {key: [] for key in configs}
    total = 1 + repeats * len(prompts) * len(configs)
    step = iter(range(1, total + 1))
    with TwoStageRuntime(target_model, draft_model, link, pin=not no_pin) as runtime, \
            progress_line("reference bench", as_json) as progress:
        progress(next(step), total, "warm-up")
        for config in configs.values():  # warm-up: first calls pay for allocation
            rule, schedule = config or (None, "sequential")
            _run(runtime, Job(prompts[0], 8, rule, sampling, seed, schedule))
        for repeat in range(repeats):
            for index, prompt in enumerate(prompts):
                for key, config in configs.items():
                    progress(next(step), total, f"repeat {repeat + 1}/{repeats} prompt {index + 1}/{len(prompts)} "
                                                f"{key[1] or 'ar'} {key[2]}")
                    rule, schedule = config or (None, "sequential")
                    result = _run(runtime, Job(prompt, max_new_tokens, rule, sampling, seed + repeat, schedule))
                    rates[key].append(len(result.tokens) / result.seconds)
                    if rule is not None:
                        counts = np.asarray(result.accept_counts)
                        accepted[key].append(float(np.dot(np.arange(len(counts)), counts) / counts.sum()))
                        hits[key].append(result.overlap_hits / max(result.rounds - 1, 1))
    agreement = None
    if sampling.greedy:
        agree = [greedy_agreement(target_model.fresh(), draft_model.fresh(), list(p), max_new_tokens) for p in prompts]
        agreement = sum(a for a, _ in agree) / sum(n for _, n in agree)
    ar_rate = statistics.median(rates[("ar", "", "")])
    rows = []
    for key in configs:
        mode, tree, schedule = key
        rows.append({"mode": mode, "tree": tree, "schedule": schedule,
                     "backend": label if mode == "spec" else backend.label,
                     "tokens_per_s": statistics.median(rates[key]),
                     "speedup": statistics.median(rates[key]) / ar_rate,
                     "mean_accepted_per_round": statistics.mean(accepted[key]) if accepted[key] else 0.0,
                     "overlap_hit_rate": statistics.mean(hits[key]) if schedule == "overlap" else None})
    written = write_records(Path(output), rows)
    record = {"rows": rows, "greedy_token_acceptance": agreement, "prompts": len(prompts),
              "max_new_tokens": max_new_tokens, "repeats": repeats, "temperature": temperature, "link": link_label,
              "pinned": runtime.pinned, "backend": label, "written": [str(p) for p in written]}
    if as_json:
        emit_json(record)
        return
    emit_table([[r["mode"], r["tree"], r["schedule"], f"{r['tokens_per_s']:.1f}", f"{r['speedup']:.2f}x",
                 f"{r['mean_accepted_per_round']:.2f}",
                 "" if r["overlap_hit_rate"] is None else f"{r['overlap_hit_rate']:.2f}"] for r in rows],
               ["mode", "tree", "schedule", "tokens/s", "speedup", "accepted/round", "overlap hits"])
    tail = f"greedy token acceptance {agreement:.3f}; " if agreement is not None else ""
    click.echo(f"{tail}{len(prompts)} prompts x {repeats} repeats on {label}; wrote {written[0]}")
