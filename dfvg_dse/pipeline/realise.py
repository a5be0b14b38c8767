"""A searched design as the closest design a serving engine runs, and that design's DecodeConfig
(docs/search.md, "Exports"): the export prices what the engine will run, not what was searched.

Engines run the draft on the target's GPU, in turn with verification (no FPGA, no overlap), and
each release has its own tree and batch rules (specs/deploy.py): a chain of the searched tree's
depth (vLLM, transformers, TensorRT-LLM), or SGLang's top-k pool, whose expected tree this module
builds by SGLang's rule with the acceptance profile's rank probabilities as the draft's scores.
"""

from __future__ import annotations

from typing import NamedTuple

from dfvg_dse.pipeline.estimate import Estimate, estimate
from dfvg_dse.specs import AcceptanceProfile, DecodeConfig, DeviceSpec, ModelSpec, SystemSpec, TreeSpec
from dfvg_dse.specs.deploy import EngineSupport, pool_size
from dfvg_dse.tree.shapes import chain


class Realised(NamedTuple):
    """What an engine runs of a design: its tree, batch and drafter dtype, and why they differ."""

    tree: TreeSpec
    batch: int
    topk: int  # children kept per node (1: a chain)
    draft_dtype: str
    changes: tuple[str, ...]  # each way the realised design differs from the searched one


def max_children(tree: TreeSpec) -> int:
    """The most children any node of the tree has (1 for a chain)."""
    counts: dict[int, int] = {}
    for parent in tree.parents[1:]:
        counts[parent] = counts.get(parent, 0) + 1
    return max(counts.values(), default=1)


def topk_pool_tree(profile: AcceptanceProfile, steps: int, topk: int, draft_tokens: int) -> TreeSpec:
    """SGLang's draft tree: step 0 scores the root's `topk` best children; each later step gives each
    of the `topk` best frontier nodes its `topk` best children (score = parent's score x the child's
    probability), adds all of them to the pool and keeps the `topk` best as the next frontier; the
    `draft_tokens` best of the pool are verified, in pool order. Scores are the profile's rank
    probabilities; ties go to the earlier pool entry (so a parent always precedes its children)."""
    if draft_tokens > pool_size(steps, topk):
        raise ValueError(f"{draft_tokens} draft tokens exceed the pool of {pool_size(steps, topk)}")
    probs = profile.matrix(steps, topk)
    pool: list[tuple[float, int, int]] = []  # (score, parent's pool index or -1 for the root, rank)
    frontier = [(1.0, -1)]
    for step in range(steps):
        base = len(pool)
        candidates = [(score * float(probs[step, r]), parent, r) for score, parent in frontier for r in range(topk)]
        pool.extend(candidates)
        best = sorted(range(len(candidates)), key=lambda i: (-candidates[i][0], i))[:topk]
        frontier = [(candidates[i][0], base + i) for i in best]
    chosen = sorted(sorted(range(len(pool)), key=lambda i: (-pool[i][0], i))[:draft_tokens])
    node = {-1: 0} | {index: k + 1 for k, index in enumerate(chosen)}
    parents = (-1,) + tuple(node[pool[i][1]] for i in chosen)
    ranks = (0,) + tuple(pool[i][2] for i in chosen)
    return TreeSpec(parents, ranks, f"sglang:{steps}x{topk}:{draft_tokens}")


def realise(tree: TreeSpec, batch: int, support: EngineSupport, profile: AcceptanceProfile, target_dtype: str,
            draft_dtype: str) -> Realised:
    """The closest design `support`'s release runs of a searched tree at a searched batch."""
    changes = []
    depth = tree.depth
    if support.trees == "chain" or max_children(tree) == 1:
        realised, topk = chain(depth), 1
        if max_children(tree) > 1:
            changes.append(f"{support.display_name} drafts one chain: the {tree.budget}-token tree becomes a chain of "
                           f"its depth, {depth}")
    else:
        topk = max_children(tree)
        tokens = min(tree.budget, pool_size(depth, topk))
        realised = topk_pool_tree(profile, depth, topk, tokens)
        if tokens < tree.budget:
            changes.append(f"{support.display_name} verifies at most topk + (steps - 1) x topk^2 = {tokens} draft tokens "
                           f"at {depth} steps and top-{topk}: the {tree.budget}-token tree becomes its {tokens} best")
        changes.append(f"{support.display_name} grows its tree from the draft's top-{topk} scores; exported as steps "
                       f"{depth}, top-{topk}, {tokens} draft tokens (--speculative-num-draft-tokens {tokens + 1}: SGLang "
                       "counts the root) and priced as the tree SGLang's rule picks with the profile's rank "
                       "probabilities")
    served = support.batch(batch)
    if served != batch:
        changes.append(f"{support.display_name} serves speculative decoding at batch {support.max_batch} only: batch "
                       f"{batch} becomes {served}")
    dtype = target_dtype if support.draft_dtype == "target" else draft_dtype
    if dtype != draft_dtype:
        changes.append(f"{support.display_name} runs the drafter in the target's dtype: {draft_dtype} becomes {dtype}")
    return Realised(realised, served, topk, dtype, tuple(changes))


def realised_config(target: ModelSpec, draft: ModelSpec, profile: AcceptanceProfile, verifier: DeviceSpec,
                    realised: Realised, context: int, sync_s: float, record_bytes: int) -> DecodeConfig:
    """The realised design as a DecodeConfig: drafter and target on the verifier, in turn."""
    drafter = draft.with_dtypes(realised.draft_dtype, realised.draft_dtype)
    return DecodeConfig(target, SystemSpec(verifier, verifier, None), drafter, profile, tree=realised.tree,
                        schedule="sequential", batch=realised.batch, context=context, sync_s=sync_s,
                        record_bytes=record_bytes, name=realised.tree.name)


def realise_and_price(space, tree: TreeSpec, batch: int, verify_device: str, support: EngineSupport,
                      target_dtype: str, draft_dtype: str) -> tuple[Realised, Estimate]:
    """The realised design of a searched tree and batch on `verify_device` of a SearchSpace (whose
    GPUs are priced by the release's cost profile), and its Estimate."""
    verifier = next(d for d in space.verify_devices if d.name == verify_device)
    if space.draft.drafts_by_lookup:  # a lookup has no weights, so no dtype to change
        draft_dtype = target_dtype
    realised = realise(tree, batch, support, space.acceptance, target_dtype, draft_dtype)
    config = realised_config(space.target, space.draft, space.acceptance, verifier, realised, space.context,
                             space.sync_s, space.record_bytes)
    return realised, estimate(config)
