"""Forwards of a model spread over a group of GPUs (issue 17; docs/cost-model.md, "Parallel stages").

Tensor parallelism (Megatron layout) splits every layer's heads, FFN width (an expert's width for a
mixture of experts) and vocabulary over T devices: each runs the forward of a *shard*, itself a
model (`shard_model`), and the devices sum their partial outputs with two all-reduces per decoder
layer (after attention's output projection and after the FFN's down projection) plus one after the
vocabulary-parallel embedding, and gather the logits once. KV heads split while they last and are
copied when T exceeds them (vLLM and TensorRT-LLM replicate them).

Pipeline parallelism puts L/P consecutive layers on each of P devices. One forward passes every
stage in turn: its latency is the TP forward of all L layers, P - 1 hops of the hidden states over
the link, and P - 1 more fixed forward overheads; each stage holds L/P layers in memory. A stage is
busy 1/P of a round unless P independent rounds are in flight; speculation keeps one round per
sequence in flight, so at batch 1 the other stages wait (TODO(issue 17): micro-batched pipelines,
the rounds of b sequences staggered over the stages).

Expert parallelism (vLLM --enable-expert-parallel, SGLang --ep-size, with attention tensor
parallel over the same GPUs) keeps every routed expert whole on one GPU, 1/E of them each, and
splits attention as TP does. Every GPU already holds every token after attention's all-reduce, so
dispatch costs nothing, and the combine is the all-reduce TP does after the FFN anyway: the
collectives are TP's. The layer waits for the GPU whose experts the tokens touch most
(costs/moe.py), where TP's width split is balanced by construction; in exchange each expert's
GEMM is whole. TODO(issue 17): data-parallel attention with an all-to-all dispatch (DeepEP).

A collective over N ranks on a link (NCCL's model of itself, src/graph/tuning.cc): a fixed start
`collective_base_latency_s`, one `collective_step_latency_s` per algorithm step and the bytes each
rank sends at the link's achieved bandwidth. Ring all-reduce: 2(N-1) steps, 2(N-1)/N x B per rank;
all-gather: N-1 steps, (N-1)/N x B. Between nodes (`ethernet-rdma`, `infiniband` links) NCCL's double binary
tree takes 2 log2 N steps and 2 B per rank; the cheaper of ring and tree is used there.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dfvg_dse.costs.link import link_time
from dfvg_dse.specs import InputError, LinkSpec, ModelSpec, SpecError
from dfvg_dse.specs.parallel import ParallelGroup

ACTIVATION_BYTES = 2.0  # hidden states and logits travel in 16 bits (fp16/bf16), fp8 weights included
ALL_REDUCES_PER_LAYER = 2
TREE_LINKS = ("ethernet-rdma", "infiniband")  # links between nodes, where NCCL's tree has log2 N depth


def _split(total: int, parts: int, what: str, model: ModelSpec, field: str = "tensor_parallel") -> int:
    if total % parts:
        raise SpecError(field, parts, f"must divide {model.name}'s {what} ({total})")
    return total // parts


def shard_model(model: ModelSpec, tensor: int, pipeline: int = 1, expert: int = 1) -> ModelSpec:
    """The part of `model` one device holds under TP `tensor` and PP `pipeline` (the largest stage:
    ceil(L / P) layers, the embedding and the LM head, the latter split over the vocabulary); with
    expert parallelism (`expert` = `tensor`) whole experts, 1/E of them, instead of every expert's 1/T.
    A dense model on an expert-parallel group is tensor parallel (vLLM and SGLang ignore the experts'
    degree there; costs/forward.py says so)."""
    if pipeline > model.n_layers:
        raise SpecError("pipeline_parallel", pipeline, f"must be <= {model.name}'s {model.n_layers} layers")
    if tensor == 1 and pipeline == 1:
        return model
    heads = _split(model.n_heads, tensor, "attention heads", model)
    kv = model.n_kv_heads
    if kv % tensor == 0:
        kv_heads = kv // tensor
    elif tensor % kv == 0:
        kv_heads = 1  # each device keeps a copy of the one KV head its query heads read
    else:
        raise SpecError("tensor_parallel", tensor, f"must divide {model.name}'s {kv} KV heads or be a multiple of them")
    stage = math.ceil(model.n_layers / pipeline)
    moe = model.moe
    if moe is not None:  # shared experts split in width either way (vLLM: TP-sharded under EP too)
        shared = _split(moe.shared_width, tensor, "shared-expert width", model) if moe.n_shared else 0
        if expert > 1:
            _split(moe.n_experts, expert, "experts", model, "expert_parallel")
            moe = dataclasses.replace(moe, ep_ranks=expert, d_shared=shared)
        else:
            moe = dataclasses.replace(moe, d_expert=_split(moe.d_expert, tensor, "expert width", model), d_shared=shared)
        # the largest stage: the one with the most MoE layers (the dense first layers sit on the first)
        moe = dataclasses.replace(moe, dense_layers=max(0, moe.dense_layers - (model.n_layers - stage)))
    dense_ffn = model.moe is None or model.moe.dense_layers > 0
    d_ffn = _split(model.d_ffn, tensor, "FFN width", model) if dense_ffn else model.d_ffn  # unused when all are MoE
    # windowed layers spread evenly (gpt-oss alternates): the stage's share, rounded towards full attention
    sliding = model.sliding_layers * stage // model.n_layers if model.n_layers else 0
    window = 0 if model.sliding_layers and not sliding else model.sliding_window  # 0: full attention only
    return dataclasses.replace(model, name=f"{model.name}-shard", n_layers=stage,
                               n_heads=heads, n_kv_heads=kv_heads, d_ffn=d_ffn,
                               vocab_size=math.ceil(model.vocab_size / tensor), moe=moe, sliding_layers=sliding,
                               sliding_window=window, mtp_layers=min(model.mtp_layers, stage),
                               # a head's tables split over the vocabulary as the target's do
                               embedding_rows=None if model.embedding_rows is None else
                               math.ceil(model.embedding_rows / tensor),
                               shared_params=math.ceil(model.shared_params / tensor))


def group_shard(model: ModelSpec, device, stages: bool = True) -> ModelSpec:
    """The shard of `model` one GPU of the group `device` holds (its pipeline stage too when `stages`);
    a degree the model does not divide is one line naming the group."""
    group = device.parallel
    try:
        return shard_model(model, group.tensor, group.pipeline if stages else 1, group.expert)
    except SpecError as err:
        raise InputError(f"{device.name}: {err}") from None


def collective_time_s(link: LinkSpec, n_bytes, ranks: int, all_reduce: bool = True):
    """Seconds of one all-reduce (or all-gather) of `n_bytes` per rank over `ranks` devices."""
    payload = np.asarray(n_bytes, dtype=float)
    if ranks <= 1:
        return np.zeros_like(payload)
    passes = 2 if all_reduce else 1  # reduce-scatter then all-gather
    bandwidth = link.achieved_bandwidth_bytes_per_s
    ring = (link.collective_base_latency_s + passes * (ranks - 1) * link.collective_step_latency_s
            + passes * (ranks - 1) / ranks * payload / bandwidth)
    if link.link_type not in TREE_LINKS or not all_reduce:
        return ring
    tree = (link.collective_base_latency_s + 2 * math.ceil(math.log2(ranks)) * link.collective_step_latency_s
            + 2 * payload / bandwidth)
    return np.minimum(ring, tree)


def communication_time_s(model: ModelSpec, group: ParallelGroup, n_tokens, batch=1):
    """Seconds one forward of n tokens x b sequences spends in collectives and stage hops."""
    rows = np.asarray(n_tokens, dtype=float) * np.asarray(batch, dtype=float)
    hidden = rows * model.d_model * ACTIVATION_BYTES
    out = np.zeros_like(rows)
    if group.tensor > 1:
        per_layer = collective_time_s(group.link, hidden, group.tensor)
        logits = collective_time_s(group.link, rows * model.vocab_size * ACTIVATION_BYTES, group.tensor, all_reduce=False)
        out = out + (ALL_REDUCES_PER_LAYER * model.n_layers + 1) * per_layer + logits
    if group.pipeline > 1:
        out = out + (group.pipeline - 1) * link_time(group.link, hidden).time_s
    return out
