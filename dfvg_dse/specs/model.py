"""Frozen specifications of models (issue 17: mixture of experts, multi-head latent attention,
alternating sliding windows), validated on construction; hardware.py holds the devices.

Counts and widths are integers; a bad value raises `SpecError`, naming the field, the value and what
is allowed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from dfvg_dse.specs.hardware import (SCALE_BYTES, SpecError, _require_choice, _require_int)
from dfvg_dse.units import DTYPE_BYTES, DTYPE_COMPUTE

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "opt", "mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss")
NORMS = ("rms", "layer")
# model-free lookup drafters (specs/drafter.py LookupSpec): n-gram / prompt lookup, suffix decoding
LOOKUP_KINDS = ("ngram", "suffix")
# drafter kinds with no decoder layer: Medusa's residual heads, model-free lookup
LAYERLESS_KINDS = ("medusa", *LOOKUP_KINDS)
MAX_ROUTING_SKEW = 4.0


@dataclass(frozen=True)
class MoeSpec:
    """A mixture-of-experts FFN: each MoE layer sends a token to `experts_per_token` of its
    `n_experts` routed experts (gated FFNs of width `d_expert`) chosen by a router (d_model x
    n_experts); the first `dense_layers` layers keep the model's dense FFN of d_ffn.
    `routing_skew` is the Zipf exponent of how often each expert is chosen (0: uniformly;
    costs/moe.py). Under expert parallelism the spec is one GPU's share: the experts spread whole,
    round robin, over `ep_ranks` GPUs (n_experts still counts them all; each holds n_experts / ep_ranks).
    `n_shared` experts of the same width run for every token (DeepSeek-V3: 1); `router_bias`: the router
    has one bias per expert (gpt-oss; DeepSeek-V3's score-correction bias); `expert_bits`: bits per
    stored expert weight when the experts are quantised apart from the rest (gpt-oss's MXFP4: 4.25, a
    4-bit value and an 8-bit scale per 32), 0 for the model's weight dtype."""

    n_experts: int
    experts_per_token: int
    d_expert: int
    dense_layers: int = 0
    routing_skew: float = 0.0
    ep_ranks: int = 1
    n_shared: int = 0
    router_bias: bool = False
    expert_bits: float = 0.0
    d_shared: int = 0  # width of each shared expert (0: d_expert; a tensor-parallel shard splits it)

    def __post_init__(self) -> None:
        _require_int(self, "n_experts", "experts_per_token", "d_expert", "ep_ranks")
        if self.n_experts % self.ep_ranks:
            raise SpecError("expert_parallel", self.ep_ranks, f"must divide the {self.n_experts} experts")
        if self.experts_per_token > self.n_experts:
            raise SpecError("experts_per_token", self.experts_per_token, f"must be <= n_experts ({self.n_experts})")
        if isinstance(self.dense_layers, bool) or not isinstance(self.dense_layers, int) or self.dense_layers < 0:
            raise SpecError("dense_layers", self.dense_layers, "must be an integer >= 0")
        if not (isinstance(self.routing_skew, (int, float)) and 0 <= self.routing_skew <= MAX_ROUTING_SKEW):
            raise SpecError("routing_skew", self.routing_skew, f"must be in [0, {MAX_ROUTING_SKEW:g}] (0: uniform)")
        if isinstance(self.n_shared, bool) or not isinstance(self.n_shared, int) or self.n_shared < 0:
            raise SpecError("n_shared", self.n_shared, "must be an integer >= 0")
        if not (isinstance(self.expert_bits, (int, float)) and 0 <= self.expert_bits <= 32):
            raise SpecError("expert_bits", self.expert_bits, "must be in [0, 32] (0: the model's weight dtype)")

    @property
    def shared_width(self) -> int:
        """Width of each shared expert (its FFN), d_expert unless a shard split it apart."""
        return self.d_shared or self.d_expert

    @property
    def experts_per_rank(self) -> int:
        return self.n_experts // self.ep_ranks


@dataclass(frozen=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3): queries through a rank-`q_lora_rank` bottleneck
    (0: a full q projection), keys and values through a shared `kv_lora_rank` latent, which is what
    the KV cache holds, with a `qk_rope_head_dim`-wide rotary key beside it; per head the query and
    key are qk_nope + qk_rope wide and the value `v_head_dim`."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self) -> None:
        _require_int(self, "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        if isinstance(self.q_lora_rank, bool) or not isinstance(self.q_lora_rank, int) or self.q_lora_rank < 0:
            raise SpecError("q_lora_rank", self.q_lora_rank, "must be an integer >= 0 (0: no query compression)")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cached_values_per_token(self) -> int:
        """Values one layer caches per token: the latent and the rotary key (shared by all heads)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer, enough to count its parameters, FLOPs and bytes.

    `d_embed` is the width of the token embedding and LM head (OPT-350M projects 512 <-> 1024);
    `learned_positions` is the number of learned position rows (OPT: max positions + 2), 0 for
    rotary models.
    """

    name: str
    family: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ffn: int
    vocab_size: int
    max_positions: int
    tied_embeddings: bool = False
    gated_ffn: bool = True
    qkv_bias: bool = False
    o_bias: bool = False
    ffn_bias: bool = False
    qk_norm: bool = False
    norm: str = "rms"
    norm_affine: bool = True  # OPT's layer_norm_elementwise_affine = false leaves norms without parameters
    final_norm: bool = True  # post-LN OPT (350M) and _remove_final_layer_norm have none
    d_embed: int = 0  # 0 means d_model
    learned_positions: int = 0
    sliding_window: int = 0  # attention span in tokens (Mistral-7B v0.1: 4096); 0 means full context
    weight_dtype: str = "float16"
    kv_dtype: str = "float16"
    display_name: str = ""
    source: str = ""
    # quantised weights: one 16-bit scale per group of this many values (0: per channel, negligible);
    # weight_bits > 0 gives the mean bits per weight instead (llama.cpp k-quants publish theirs)
    weight_group_size: int = 0
    weight_bits: float = 0.0
    moe: MoeSpec | None = None  # a mixture-of-experts FFN (None: dense)
    mla: MlaSpec | None = None  # multi-head latent attention (None: multi-/grouped-query attention)
    # layers under `sliding_window` (0: all of them when there is a window); gpt-oss alternates, 12 of 24
    sliding_layers: int = 0
    attention_sinks: bool = False  # gpt-oss: one learned logit per head in every softmax
    # DeepSeek-V3's multi-token-prediction modules: counted apart (ParamCounts.mtp), never in a forward
    mtp_layers: int = 0
    # dtype of the embedding table and LM head when the checkpoint stores them apart from the other
    # weights ("": the weight dtype; DeepSeek-V3's FP8 checkpoint keeps them bf16)
    head_dtype: str = ""
    # A draft head priced as a model (specs/drafter.py, HeadSpec.as_model): its kind ("": a language
    # model), the weights every token multiplies by outside its layers (EAGLE's input projection fc,
    # EAGLE-3's second half of q/k/v, MTP's eh_proj) and the target hidden-state bytes it reads per
    # accepted token (up the link when it drafts on another device than the target verifies on)
    head_kind: str = ""
    extra_matmul_params: int = 0
    feature_bytes_per_token: int = 0
    # rows of the token embedding when they differ from the LM head's (EAGLE-3 embeds the target's
    # whole vocabulary and drafts over 32,000; Medusa embeds nothing: 0); None: vocab_size
    embedding_rows: int | None = None
    # parameters (in `total`) of the tables a head shares with its target, stored once when both sit
    # on one device: the target's embedding, and its LM head for EAGLE-1/2 and MTP
    shared_params: int = 0
    # positions one round can draft past the root (Medusa: one per head); 0: no limit
    max_draft_depth: int = 0
    # a model-free lookup drafter (head_kind in LOOKUP_KINDS, specs/drafter.py LookupSpec): host-CPU seconds
    # one sequence's lookup takes a round, fixed and per token of context it searches
    lookup_s_per_round: float = 0.0
    lookup_s_per_context_token: float = 0.0

    def __post_init__(self) -> None:
        _require_choice(self, "family", FAMILIES)
        if self.mla is not None and not isinstance(self.mla, MlaSpec):
            raise SpecError("mla", self.mla, "must be a MlaSpec or None")
        if self.moe is not None and not isinstance(self.moe, MoeSpec):
            raise SpecError("moe", self.moe, "must be a MoeSpec or None")
        if self.moe is not None and self.moe.dense_layers > self.n_layers:
            raise SpecError("moe.dense_layers", self.moe.dense_layers, f"must be <= n_layers ({self.n_layers})")
        # Medusa's heads are residual blocks on the last hidden state and a lookup has no model: no
        # decoder layer of their own
        layerless = self.head_kind in LAYERLESS_KINDS
        _require_int(self, *(("n_layers",) if not layerless else ()), "d_model", "n_heads",
                     "n_kv_heads", "head_dim", "d_ffn", "vocab_size", "max_positions")
        for name in ("extra_matmul_params", "feature_bytes_per_token", "shared_params", "max_draft_depth",
                     *(("embedding_rows",) if self.embedding_rows is not None else ()),
                     *(("n_layers",) if layerless else ())):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(name, value, "must be an integer >= 0")
        for name in ("sliding_layers", "mtp_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= self.n_layers:
                raise SpecError(name, value, f"must be an integer in 0..n_layers ({self.n_layers})")
        if self.d_model % self.n_heads:
            raise SpecError("n_heads", self.n_heads, f"must divide d_model ({self.d_model})")
        if self.n_heads % self.n_kv_heads:
            raise SpecError("n_kv_heads", self.n_kv_heads, f"must divide n_heads ({self.n_heads})")
        if self.d_embed == 0:
            object.__setattr__(self, "d_embed", self.d_model)
        _require_int(self, "d_embed")
        for name in ("learned_positions", "sliding_window"):
            if isinstance(getattr(self, name), bool) or getattr(self, name) < 0:
                raise SpecError(name, getattr(self, name), "must be an integer >= 0")
        _require_choice(self, "norm", NORMS)
        _require_choice(self, "weight_dtype", list(DTYPE_BYTES))
        if self.head_dtype:
            _require_choice(self, "head_dtype", list(DTYPE_BYTES))
        _require_choice(self, "kv_dtype", list(DTYPE_BYTES))
        if isinstance(self.weight_group_size, bool) or not isinstance(self.weight_group_size, int) \
                or self.weight_group_size < 0 or self.weight_group_size == 1:
            raise SpecError("weight_group_size", self.weight_group_size, "must be 0 (per channel) or an integer >= 2")
        if not (isinstance(self.weight_bits, (int, float)) and 0 <= self.weight_bits <= 32):
            raise SpecError("weight_bits", self.weight_bits, "must be in [0, 32] (0: from the dtype and groups)")
        for name in ("lookup_s_per_round", "lookup_s_per_context_token"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise SpecError(name, value, "must be a finite number of seconds >= 0")

    @property
    def drafts_in_one_pass(self) -> bool:
        """Drafts every position of a round in one forward (Medusa's heads), not level by level."""
        return self.head_kind == "medusa"

    @property
    def drafts_by_lookup(self) -> bool:
        """A model-free lookup (n-gram / prompt lookup, suffix decoding): no weights, one continuation
        (a chain) a round, found on the host CPU beside the verifier."""
        return self.head_kind in LOOKUP_KINDS

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per stored weight, group scales included (one 2-byte scale per group)."""
        if self.weight_bits > 0:
            return self.weight_bits / 8.0
        scales = SCALE_BYTES / self.weight_group_size if self.weight_group_size and DTYPE_BYTES[self.weight_dtype] < 2 else 0.0
        return DTYPE_BYTES[self.weight_dtype] + scales

    @property
    def kv_bytes_per_value(self) -> float:
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def compute_dtype(self) -> str:
        """The dtype whose peak ops/s a forward of this model runs at (fp16, bf16, fp32, fp8, fp4, int8)."""
        return DTYPE_COMPUTE[self.weight_dtype]

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes of K and V cached per token per sequence, all layers (MLA: the latent and rotary key)."""
        if self.mla is not None:
            return self.n_layers * self.mla.cached_values_per_token * self.kv_bytes_per_value
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.kv_bytes_per_value

    @property
    def query_heads_per_kv(self) -> int:
        """Query heads that read one cached K/V head: the GQA group (MLA: every head shares the latent).
        An attention kernel packs them into the rows of its tiles (FlashDecoding, FlashInfer)."""
        return self.n_heads if self.mla is not None else self.n_heads // self.n_kv_heads

    @property
    def attention_flops_per_pair(self) -> int:
        """FLOPs of one (query, cached key) pair in one head of one layer: QK^T and AV, 2 per MAC. MLA
        as vLLM and SGLang decode it, absorbed: scores over the latent and rotary key, values over the latent."""
        if self.mla is not None:
            return 2 * (self.mla.cached_values_per_token + self.mla.kv_lora_rank)
        return 4 * self.head_dim

    def attended_context(self, context_tokens):
        """Cached tokens a new token attends to, averaged over the layers: all of them, or the last
        `sliding_window` in the layers that have one (attention FLOPs and KV bytes are sums over
        layers of terms linear in each layer's span, so the mean is exact)."""
        if self.sliding_window == 0:
            return context_tokens
        windowed = np.minimum(context_tokens, self.sliding_window)
        sliding = self.sliding_layers or self.n_layers
        if sliding == self.n_layers:
            return windowed
        return (sliding * windowed + (self.n_layers - sliding) * np.asarray(context_tokens)) / self.n_layers

    def served_in(self, dtype: str | None, default: str) -> ModelSpec:
        """The model as a study serves it: weights and KV cache in `dtype` when one is asked for;
        otherwise in `default`, unless the checkpoint is stored narrower than 16 bits (DeepSeek-V3's
        FP8), which keeps its own dtypes."""
        if dtype is None and DTYPE_BYTES[self.weight_dtype] < 2:
            return self
        return self.with_dtypes(dtype or default, dtype or default)

    def with_dtypes(self, weight_dtype: str | None = None, kv_dtype: str | None = None) -> ModelSpec:
        """The same model stored in other dtypes (quantised weights, a smaller KV cache); another weight
        dtype applies to every weight, experts stored apart (gpt-oss's MXFP4) included."""
        moe, head = self.moe, self.head_dtype
        if weight_dtype and weight_dtype != self.weight_dtype:
            head = ""
            if moe is not None and moe.expert_bits:
                moe = dataclasses.replace(moe, expert_bits=0.0)
        return dataclasses.replace(self, weight_dtype=weight_dtype or self.weight_dtype,
                                   kv_dtype=kv_dtype or self.kv_dtype, moe=moe, head_dtype=head)

    @property
    def moe_layers(self) -> int:
        """Decoder layers whose FFN is a mixture of experts."""
        return 0 if self.moe is None else self.n_layers - self.moe.dense_layers

    def with_routing_skew(self, skew: float) -> ModelSpec:
        """The same MoE model with another routing skew (a dense model is returned unchanged)."""
        return self if self.moe is None else dataclasses.replace(self, moe=dataclasses.replace(self.moe, routing_skew=skew))

    def with_quantisation(self, group_size: int = 0, bits_per_weight: float = 0.0) -> ModelSpec:
        """The same weights with group scales (or a stated mean width in bits) counted."""
        return dataclasses.replace(self, weight_group_size=group_size, weight_bits=float(bits_per_weight))
