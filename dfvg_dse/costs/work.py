"""Parameter, FLOP and byte counts of one forward pass (docs/cost-model.md §1-2).

A forward runs n new tokens (a chain or a tree of n nodes) for each of b sequences whose KV cache
already holds c tokens. Counts are exact for the parameters and follow docs/cost-model.md §2 for traffic:
weights are read once per forward whatever n and b are; KV is read for the c cached tokens and
written for the n new ones; activation traffic is neglected (under 1% of the weight bytes for
n <= 64 at batch 1). A mixture of experts streams only the experts its tokens touch
(costs/moe.py). All functions broadcast over numpy arrays of n, c and b.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.costs.moe import expected_busiest_rank_experts
from dfvg_dse.specs import ModelSpec
from dfvg_dse.units import DTYPE_BYTES


class ParamCounts(NamedTuple):
    """Parameter counts of a model (numbers of values, not bytes)."""

    total: int  # every parameter, each tied matrix once: what a checkpoint stores
    embedding: int  # token embedding (+ learned positions): rows are gathered, not streamed
    matmul: int  # weights of every linear layer a forward multiplies by, LM head included
    per_layer: int  # one decoder layer, norms and biases included
    head: int  # LM head matrix, d_embed x vocab (shared with the embedding when tied)
    read_per_forward: int  # streamed by one forward: all but the embedding tables, LM head included
    # mixture of experts: one routed expert's weights and all routed experts of every MoE layer (0
    # when dense); the matmul weights one token multiplies by (its k experts; dense: matmul); and
    # the parameters one token uses, embedding row aside (OpenAI's "active"; Mistral's and Qwen's
    # model cards add the embedding table)
    expert: int = 0
    routed: int = 0
    active_matmul: int = 0
    active: int = 0
    mtp: int = 0  # DeepSeek-V3's multi-token-prediction modules, outside `total` (its model card's 671B)


def _norm_params(model: ModelSpec) -> int:
    """Parameters of one norm: LayerNorm has weight and bias, RMSNorm a weight; none when not affine."""
    if not model.norm_affine:
        return 0
    return 2 * model.d_model if model.norm == "layer" else model.d_model


def _mla_counts(model: ModelSpec) -> tuple[int, int]:
    """(matmul weights, norms) of one layer's multi-head latent attention: q (through its rank-q_lora
    bottleneck, or whole), the latent-and-rotary-key projection, the latent's up-projection to every
    head's key and value, and the output; the bottlenecks' RMSNorms."""
    d, h, mla = model.d_model, model.n_heads, model.mla
    q = d * mla.q_lora_rank + mla.q_lora_rank * h * mla.qk_head_dim if mla.q_lora_rank else d * h * mla.qk_head_dim
    kv = d * mla.cached_values_per_token + mla.kv_lora_rank * h * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv + h * mla.v_head_dim * d, mla.q_lora_rank + mla.kv_lora_rank


def _attention_counts(model: ModelSpec) -> tuple[int, int]:
    """(matmul weights, all parameters) of one layer's attention and its two norms."""
    if model.mla is not None:
        weights, norms = _mla_counts(model)
        return weights, weights + norms + 2 * _norm_params(model)
    d, h, kv, dh = model.d_model, model.n_heads, model.n_kv_heads, model.head_dim
    weights = d * h * dh + 2 * d * kv * dh + h * dh * d  # q, k, v, o projections
    biases = (h * dh + 2 * kv * dh if model.qkv_bias else 0) + (d if model.o_bias else 0)
    qk_norm = 2 * dh if model.qk_norm else 0  # Qwen3: one RMSNorm over head_dim for q and k
    sinks = h if model.attention_sinks else 0
    return weights, weights + biases + qk_norm + sinks + 2 * _norm_params(model)


def _ffn_counts(model: ModelSpec, width: int) -> tuple[int, int]:
    """(matmul weights, weights and biases) of one FFN of `width` (gate, up, down; or fc1, fc2)."""
    matrices = 3 if model.gated_ffn else 2
    weights = matrices * model.d_model * width
    return weights, weights + ((matrices - 1) * width + model.d_model if model.ffn_bias else 0)


def _layer_counts(model: ModelSpec) -> tuple[int, int]:
    """(matmul weights, all parameters) of one dense decoder layer."""
    (attn_w, attn_all), (ffn_w, ffn_all) = _attention_counts(model), _ffn_counts(model, model.d_ffn)
    return attn_w + ffn_w, attn_all + ffn_all


def param_counts(model: ModelSpec) -> ParamCounts:
    """Exact parameter counts of a model as Hugging Face builds it (a lookup drafter: none)."""
    if model.drafts_by_lookup:
        return ParamCounts(total=0, embedding=0, matmul=0, per_layer=0, head=0, read_per_forward=0)
    d, v, de = model.d_model, model.vocab_size, model.d_embed
    layer_matmul, layer_all = _layer_counts(model)
    head = de * v
    rows = v if model.embedding_rows is None else model.embedding_rows  # a head's table may differ from its LM head
    embedding = rows * de + model.learned_positions * d
    proj = 2 * d * de if de != d else 0  # OPT-350M project_in / project_out, no bias
    final_norm = _norm_params(model) if model.final_norm else 0
    layers_matmul, layers_all, expert, routed, active_layers = model.n_layers * layer_matmul, model.n_layers * layer_all, 0, 0, 0
    if model.moe is not None:  # MoE layers: attention, a router, shared and routed experts instead of the dense FFN
        moe, dense = model.moe, model.moe.dense_layers
        attn_w, attn_all = _attention_counts(model)
        expert, router = _ffn_counts(model, moe.d_expert)[1], d * moe.n_experts
        shared = moe.n_shared * _ffn_counts(model, moe.shared_width)[1]
        router_bias = moe.n_experts if moe.router_bias else 0
        routed = model.moe_layers * moe.experts_per_rank * expert  # one GPU's share under expert parallelism
        layers_matmul = dense * layer_matmul + model.moe_layers * (attn_w + router + shared) + routed
        layers_all = dense * layer_all + model.moe_layers * (attn_all + router + router_bias + shared) + routed
        per_token = moe.experts_per_token * expert // moe.ep_ranks  # a GPU's mean share of a token's experts
        active_layers = dense * layer_matmul + model.moe_layers * (attn_w + router + shared + per_token)
    extra = model.extra_matmul_params  # a draft head's input projections
    total = embedding + layers_all + final_norm + proj + extra + (0 if model.tied_embeddings else head)
    matmul = layers_matmul + proj + extra + head
    active_matmul = matmul if model.moe is None else active_layers + proj + extra + head
    # A tied head lives in the embedding table but is still streamed whole for the logits.
    streamed = total - embedding + (head if model.tied_embeddings else 0)
    # norms and biases: the streamed parameters outside the matmul weights
    others = streamed - matmul
    return ParamCounts(total=total, embedding=embedding, matmul=matmul, per_layer=layer_all, head=head,
                       read_per_forward=streamed, expert=expert, routed=routed, active_matmul=active_matmul,
                       active=active_matmul + others,
                       mtp=model.mtp_layers * _mtp_module(model, layers_all) if model.mtp_layers else 0)


def _mtp_module(model: ModelSpec, layers_all: int) -> int:
    """One multi-token-prediction module as DeepSeek-V3's checkpoint stores it: its own embedding and
    head copies, two RMSNorms and a 2d x d projection in, one decoder layer (the model's last kind),
    and the head's RMSNorm."""
    d = model.d_model
    last_layer = layers_all // model.n_layers if model.moe is None else (
        layers_all - model.moe.dense_layers * _layer_counts(model)[1]) // model.moe_layers
    return 2 * model.vocab_size * d + 2 * d + 2 * d * d + last_layer + d


def weight_bytes(model: ModelSpec, params, expert_params=0.0, table_params=0.0):
    """Bytes of `params` weights of which `expert_params` are routed experts, stored at their own
    width when the experts are quantised apart (gpt-oss's MXFP4), and `table_params` the embedding
    and LM head, stored at `head_dtype` when the checkpoint keeps them apart (DeepSeek-V3's FP8
    checkpoint: bf16); the rest at the model's width."""
    bits = model.moe.expert_bits if model.moe is not None else 0.0
    experts = np.asarray(expert_params, dtype=float) if bits else 0.0
    tables = np.asarray(table_params, dtype=float) if model.head_dtype else 0.0
    rest = np.asarray(params, dtype=float) - experts - tables
    return (rest * model.weight_bytes_per_param + experts * bits / 8.0
            + tables * (DTYPE_BYTES[model.head_dtype] if model.head_dtype else 0.0))


def stored_weight_bytes(model: ModelSpec, beside_target: bool = False) -> float:
    """Bytes of every stored weight (what memory must hold): the checkpoint's tensors at their widths;
    `beside_target`: a draft head on its target's device, whose shared tables the target already holds."""
    counts = param_counts(model)
    tables = counts.embedding + (0 if model.tied_embeddings else counts.head)
    shared = model.shared_params if beside_target else 0  # the shared tables are all embedding or head rows
    return float(weight_bytes(model, counts.total - shared, counts.routed, tables - shared))


def streamed_weight_bytes(model: ModelSpec, routed_tokens) -> np.ndarray:
    """Bytes of the weights one forward of `routed_tokens` tokens (n x b) streams: all of a dense
    model's but the embedding table; of a MoE, the shared part and only the routed experts its tokens
    touch (on the busiest GPU, under expert parallelism)."""
    counts = param_counts(model)
    if model.moe is None:
        return np.full(np.shape(routed_tokens), float(weight_bytes(model, counts.read_per_forward, 0.0, counts.head)))
    experts = model.moe_layers * expected_busiest_rank_experts(model.moe, routed_tokens) * counts.expert
    return weight_bytes(model, float(counts.read_per_forward - counts.routed) + experts, experts, counts.head)


def chain_tree_pairs(n_tokens: np.ndarray) -> np.ndarray:
    """Sum over the n nodes of a chain of (ancestors within the new tokens + 1) = n(n+1)/2."""
    n = np.asarray(n_tokens, dtype=float)
    return n * (n + 1) / 2


class ForwardWork(NamedTuple):
    """Work of one forward pass; every field is an array broadcast over (n, c, b)."""

    linear_flops: np.ndarray
    attention_flops: np.ndarray
    weight_bytes: np.ndarray  # streamed once per forward
    kv_read_bytes: np.ndarray
    kv_write_bytes: np.ndarray
    kv_cache_bytes: np.ndarray  # resident KV after the forward: b (c + n) tokens

    @property
    def flops(self) -> np.ndarray:
        return self.linear_flops + self.attention_flops

    @property
    def bytes(self) -> np.ndarray:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes


def forward_work(model: ModelSpec, n_tokens, context_tokens, batch=1, tree_pairs=None) -> ForwardWork:
    """FLOPs and bytes of a forward of n new tokens at context c and batch b.

    Args:
        n_tokens: new tokens per sequence (chain length or tree nodes), >= 1.
        context_tokens: tokens already in the KV cache per sequence, >= 0.
        batch: sequences.
        tree_pairs: per sequence, sum over the new nodes of (ancestors among the new nodes + 1);
            defaults to a chain, n(n+1)/2. A star of n nodes has n.

    Returns:
        ForwardWork with FLOPs (multiply and add counted as 2) and bytes.
    """
    n = np.asarray(n_tokens, dtype=float)
    c = model.attended_context(np.asarray(context_tokens, dtype=float))  # a sliding window caps the cache
    b = np.asarray(batch, dtype=float)
    pairs = chain_tree_pairs(n) if tree_pairs is None else np.asarray(tree_pairs, dtype=float)
    counts = param_counts(model)
    # 2 FLOPs per weight per token (docs/cost-model.md §2); norms and biases are below 0.1%.
    linear = 2.0 * b * n * counts.active_matmul
    # QK^T and AV: 2 x 2 x head_dim FLOPs per (query, key) pair per head (docs/cost-model.md §2; MLA:
    # ModelSpec.attention_flops_per_pair).
    attention = float(model.attention_flops_per_pair) * b * model.n_layers * model.n_heads * (n * c + pairs)
    weight = np.broadcast_to(streamed_weight_bytes(model, b * n), np.shape(linear))
    kv_token = model.kv_bytes_per_token
    return ForwardWork(
        linear_flops=linear,
        attention_flops=attention,
        weight_bytes=weight,
        kv_read_bytes=b * c * kv_token + 0.0 * n,
        kv_write_bytes=b * n * kv_token + 0.0 * c,
        kv_cache_bytes=b * model.attended_context(c + n) * kv_token,
    )
