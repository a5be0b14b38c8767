"""A design from the command line: the options that name one (target, draft, devices, tree or rule,
schedule) and the builder that turns them into a DecodeConfig, shared by `estimate` and `serve-sim`."""

from __future__ import annotations

import dataclasses
import math

import click

from dfvg_dse.acceptance.dynamic import MAX_DUO_GAMMA, MAX_EAGLE2_TOP_K
from dfvg_dse.catalog import Catalog
from dfvg_dse.cli._base import FiniteFloatRange, Temperature, catalog_of, given_options, parallel_options, \
    refuse_other_rules, refuse_unused
from dfvg_dse.pipeline import estimate
from dfvg_dse.pipeline.scenarios import Setup, adapt_rule
from dfvg_dse.specs import AdaptRule, DecodeConfig, DuoRule, Eagle2Rule, InputError, SystemSpec, draft_depth_cap
from dfvg_dse.specs.decoding import dynamic_reason
from dfvg_dse.tree import best_tree_for_round_time, from_document, parse_tree_spec
from dfvg_dse.units import DTYPE_BYTES


def _link_between(catalog: Catalog, draft, verify, name: str | None):
    if draft.name == verify.name:
        if name:
            raise InputError(f"--link {name}: draft and verify share '{verify.name}'; no link is used")
        return None
    name = name or draft.host_link or verify.host_link
    if name is None:
        raise InputError(f"--link: neither '{draft.name}' nor '{verify.name}' names a host link; pass --link")
    return catalog.link(name)


def draft_model_of(catalog: Catalog, name: str, dtype: str | None, target):
    model = catalog.draft(name, target.name)  # a model, or a draft head of the target
    # A draft checkpoint saved in fp32 (JackFram, double7) still decodes in the target's half precision.
    default = target.weight_dtype if model.weight_dtype in ("float32", "fp32") else None
    return model.with_dtypes(dtype or default, dtype or default)


KIND_WORDS = {"gpu": "a GPU", "fpga": "an FPGA", "cpu": "a CPU", "link": "a link"}


# The round-time-optimal tree costs one estimate per candidate tree: searched up to this budget and depth.
OPTIMAL_MAX_BUDGET, OPTIMAL_MAX_DEPTH = 64, 12
EAGLE2_MAX_DEPTH = 16
MAX_SYNC_US = 1e6  # --sync-us: a host sync of a whole second per round is past any host; larger is a typo


def _refuse_past_cap(ctx, name: str, value: int, cap: int, what: str, hint: str = "") -> None:
    """A value given past what the model searches is one line; the default is capped quietly."""
    if value > cap and given_options(ctx, [name]):
        raise InputError(f"--{name.replace('_', '-')} {value}: {what} go up to {cap} here{hint}")


# Which drafting options each way of drafting reads; any other given is refused, not ignored.
_RULE_OPTIONS = {"adapt": ("threshold", "temperature", "k_max", "budget", "min_depth", "max_depth"),
                 "eagle2": ("top_k", "max_depth", "total_tokens"), "duodecoding": ("gamma",),
                 "optimal": ("budget", "max_depth"), "tree": ()}
_DRAFT_OPTIONS = ("draft", "draft_device", "link_name", "acceptance_spec", "tree_spec", "dynamic", "draft_dtype",
                  "attention_efficiency", "stochastic", "sync_us")  # besides the rules': what only drafting reads



_DESIGN_OPTIONS = [
    click.option("--target", required=True, help="Target model (see `models list`)."),
    click.option("--draft", help="Draft model [required unless --schedule ar]."),
    click.option("--draft-device", help="Where the draft runs [default: the verify device; a group: 4xh100-sxm, or "
                                         "2xv80 for two FPGAs drafting side by side]."),
    parallel_options("draft", "--draft-device (or of the draft on the verify GPUs)"),
    click.option("--verify-device", required=True, help="Where the target verifies (a GPU or CPU, or a group: 4xh100-sxm)."),
    parallel_options("verify", "--verify-device"),
    click.option("--link", "link_name", help="Link between the devices [default: the draft device's host link]."),
    click.option("--acceptance", "acceptance_spec", help="Acceptance SPEC [default: pair:TARGET/DRAFT]."),
    click.option("--tree", "tree_spec", help="A static tree SPEC (chain:4, seq:2x4, ...)."),
    click.option("--dynamic", type=click.Choice(["adapt", "eagle2", "duodecoding"]), help="A dynamic drafting rule."),
    click.option("--threshold", type=FiniteFloatRange(), default=0.05, show_default=True, help="adapt: tau, in [0, 1)."),
    click.option("--temperature", type=Temperature(), default=0.0, show_default=True,
                  help="adapt: Gumbel temperature."),
    click.option("--k-max", type=click.IntRange(1, 1024), help="adapt: per-level cap [default: min(16, lanes) on an FPGA, else 16]."),
    click.option("--budget", type=click.IntRange(1, 512), default=64, show_default=True,
                  help="adapt / optimal tree: draft tokens per round."),
    click.option("--min-depth", type=click.IntRange(1, 64), help="adapt: D_min [default: ceil(T_verify / T_draft_step)]."),
    click.option("--max-depth", type=click.IntRange(1, 64), default=16, show_default=True),
    click.option("--top-k", type=click.IntRange(1, MAX_EAGLE2_TOP_K), default=10, show_default=True, help="eagle2: top_k."),
    click.option("--total-tokens", type=click.IntRange(2, 4096), default=60, show_default=True,
                  help="eagle2: verified tokens including the root."),
    click.option("--gamma", type=click.IntRange(1, MAX_DUO_GAMMA), default=24, show_default=True,
                  help="duodecoding: draft tokens per round."),
    click.option("--schedule", type=click.Choice(["ar", "sequential", "overlap"]), default="sequential", show_default=True),
    click.option("--gpu-fill", is_flag=True, help="overlap: the verifier decodes forward while it waits (DFVG)."),
    click.option("--target-dtype", type=click.Choice(list(DTYPE_BYTES))),
    click.option("--draft-dtype", type=click.Choice(list(DTYPE_BYTES)),
                  help="[default: the checkpoint's, or the target's when the draft was saved in fp32]"),
    click.option("--attention-efficiency", type=FiniteFloatRange(0, 1, min_open=True), default=1.0, show_default=True,
                  help="Tree attention vs dense (1 = TreeSort blocks, 0.5 = a sparse mask)."),
    click.option("--stochastic", is_flag=True, help="Ship draft probabilities for stochastic verification."),
    click.option("--sync-us", type=FiniteFloatRange(0, MAX_SYNC_US),
                  help="Host sync per round on host-staged links, in us [default: hwdb].")
]
_BATCH_CONTEXT_OPTIONS = [
    click.option("--batch", type=click.IntRange(1, 4096), default=1, show_default=True),
    click.option("--context", type=click.IntRange(0, 10**7), default=512, show_default=True)
]


def design_options(with_batch_context: bool = True):
    """The options that name a design (estimate's), applied in order; serve-sim draws its batch and
    contexts from the load, so it takes them without --batch and --context."""
    chosen = _DESIGN_OPTIONS + (_BATCH_CONTEXT_OPTIONS if with_batch_context else [])

    def wrap(command):
        for option in reversed(chosen):
            command = option(command)
        return command
    return wrap


def build_design(ctx, target, draft, draft_device, draft_tp, draft_pp, draft_ep, verify_device, verify_tp, verify_pp,
                 verify_ep, link_name, acceptance_spec, tree_spec, dynamic, threshold, temperature, k_max, budget,
                 min_depth, max_depth, top_k, total_tokens, gamma, schedule, gpu_fill, target_dtype, draft_dtype,
                 attention_efficiency, stochastic, sync_us, batch: int = 1, context: int = 512,
                 rounds: int = 20000) -> DecodeConfig:
    """The DecodeConfig the design options name; a round-time-optimal tree when neither --tree nor
    --dynamic is given (searched at this batch and context)."""
    if gpu_fill and schedule != "overlap":
        raise InputError("--gpu-fill needs --schedule overlap (the verifier fills the time it waits for a draft)")
    catalog = catalog_of(ctx)
    target_model = catalog.model(target).with_dtypes(target_dtype, target_dtype)
    verify = catalog.device(verify_device, tensor=verify_tp, pipeline=verify_pp, expert=verify_ep,
                            degrees_given=bool(given_options(ctx, ["verify_tp", "verify_pp", "verify_ep"])))
    draft_degrees = bool(given_options(ctx, ["draft_tp", "draft_pp", "draft_ep"]))
    if verify.kind == "fpga":  # the FPGA overlays draft; a target verifies on a GPU or CPU
        raise InputError(f"--verify-device {verify.name}: {KIND_WORDS[verify.kind]}, not a GPU or CPU (see "
                         "'dfvg-dse hw list --kind gpu' and '--kind cpu')")
    drafter = (catalog.device(draft_device, tensor=draft_tp, pipeline=draft_pp, expert=draft_ep, degrees_given=draft_degrees)
               if draft_device else catalog.colocated_draft_device(verify, draft_tp, draft_pp, draft_ep)
               if draft_degrees else verify)
    sync_s = catalog.defaults().sync_per_round_s if sync_us is None else sync_us * 1e-6
    if schedule == "ar":
        rule_options = dict.fromkeys(o for names in _RULE_OPTIONS.values() for o in names)
        refuse_unused(ctx, [*_DRAFT_OPTIONS, *rule_options], "with --schedule ar (autoregressive decoding drafts nothing)")
        config = DecodeConfig(target_model, SystemSpec(verify, verify), schedule="ar", batch=batch, context=context,
                              name="ar")
    else:
        if not draft:
            raise InputError("--draft is required for speculative schedules (or use --schedule ar)")
        draft_model = draft_model_of(catalog, draft, draft_dtype, target_model)
        profile = catalog.acceptance(acceptance_spec) if acceptance_spec else catalog.pair_profile(target, draft)
        system = SystemSpec(drafter, verify, _link_between(catalog, drafter, verify, link_name))
        base = DecodeConfig(target_model, system, draft_model, profile, tree=parse_tree_spec("chain:1"),
                            schedule=schedule, gpu_fill=gpu_fill, batch=batch, context=context,
                            attention_efficiency=attention_efficiency, send_draft_probs=stochastic, sync_s=sync_s,
                            record_bytes=catalog.defaults().token_record_bytes, name="estimate")
        if tree_spec and dynamic:
            raise InputError("give --tree or --dynamic, not both")
        refuse_other_rules(ctx, _RULE_OPTIONS, "tree" if tree_spec else dynamic or "optimal",
                           "--tree" if tree_spec else f"--dynamic {dynamic}" if dynamic else "the optimal tree")
        if tree_spec:
            path = catalog.tree_file(tree_spec)  # errors about a file's tree name the file
            config = dataclasses.replace(base, tree=parse_tree_spec(tree_spec) if path is None
                                         else from_document(catalog.tree_document(tree_spec), str(path)))
        elif dynamic:
            if dynamic_reason(draft_model):  # Medusa and lookups draft nothing level by level
                raise InputError(f"--dynamic {dynamic}: {dynamic_reason(draft_model)}")
            if dynamic == "adapt":
                setup = Setup(target_model, draft_model, profile, verify, drafter, drafter, system.link, system.link,
                              system.link, batch=batch, context=context)
                auto = adapt_rule(setup, drafter)  # k_max from the lanes, D_min from the two windows
                rule = AdaptRule(threshold, temperature, k_max or auto.k_max, budget,
                                 min(max_depth, min_depth or auto.min_depth), max_depth)
                if min_depth and min_depth > max_depth:
                    raise InputError(f"--min-depth {min_depth} exceeds --max-depth {max_depth}")
            elif dynamic == "eagle2":
                _refuse_past_cap(ctx, "max_depth", max_depth, EAGLE2_MAX_DEPTH, "EAGLE-2's expansion steps")
                rule = Eagle2Rule(top_k, min(max_depth, EAGLE2_MAX_DEPTH), total_tokens)
            else:
                rule = DuoRule(gamma)
            config = dataclasses.replace(base, tree=None, dynamic=rule)
        else:  # the tree that maximises F / t_round for this placement (Sequoia DP, lanes as the width cap)
            larger = "; give a --tree for more (tree optimize builds one)"
            _refuse_past_cap(ctx, "budget", budget, OPTIMAL_MAX_BUDGET, "the round-time-optimal tree's draft tokens",
                             larger)
            _refuse_past_cap(ctx, "max_depth", max_depth, OPTIMAL_MAX_DEPTH, "the round-time-optimal tree's levels",
                             larger)
            cap = 1 if draft_model.drafts_by_lookup else drafter.fpga.branch_lanes if drafter.fpga else None
            depth = draft_depth_cap(draft_model, min(max_depth, OPTIMAL_MAX_DEPTH))  # Medusa: one level per head
            best = best_tree_for_round_time(profile, lambda t: estimate(dataclasses.replace(base, tree=t),
                                                                        rounds=rounds).round_time_s or math.inf,
                                            min(budget, OPTIMAL_MAX_BUDGET), depth, cap)
            config = dataclasses.replace(base, tree=best.tree)
    return config
