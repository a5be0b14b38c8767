"""A small numpy decoder for the reference decoder (issue 6): llama, mistral, qwen2, qwen3 and
pre-LN OPT layers as Hugging Face transformers defines them, a KV cache, tree forwards and rollback.

Shapes follow nanoGPT's comments: T new tokens, S cached + new, H heads, G kv heads, D head_dim.
Rotary embeddings use transformers' rotate_half convention; Qwen3 normalises q and k per head
before rotation; grouped-query attention repeats each kv head H / G times. The tree mask is built
from parents alone (ancestors first), so this module never imports the analytical tree code: the
reference stays an independent check of it.

OPT (transformers' OPTDecoderLayer): learned positions read at position + 2, LayerNorm (eps 1e-5)
before attention and FFN, ReLU FFN with biases, q scaled by head_dim^-0.5, tied head. Post-LN
OPT-350M and its 512-wide embedding projection are refused rather than guessed.

TODO(#6): the shipped tiny pair, sampling and dynamic drafting, two processes, traces and
`reference bench`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dfvg_dse.specs import ModelSpec
from dfvg_dse.specs.checkpoint import checkpoint_tensor_shapes

LLAMA_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
ENGINE_FAMILIES = LLAMA_FAMILIES + ("opt",)
OPT_POSITION_OFFSET = 2  # transformers' OPTLearnedPositionalEmbedding reads row position + 2


@dataclass(frozen=True)
class ReferenceConfig:
    """Shape (a ModelSpec) plus what the forward needs beyond counting: rotary base and norm eps."""

    spec: ModelSpec
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    layer_norm_eps: float = 1e-5  # OPT's nn.LayerNorm default

    def __post_init__(self) -> None:
        spec = self.spec
        if spec.family not in ENGINE_FAMILIES:
            raise ValueError(f"family {spec.family!r}: the reference engine runs {', '.join(ENGINE_FAMILIES)}")
        if spec.family == "opt" and (not spec.final_norm or not spec.norm_affine
                                     or spec.d_embed not in (0, spec.d_model)):
            raise ValueError("OPT: the reference engine runs pre-LN OPT with affine norms and no embedding "
                             "projection (not OPT-350M's layout)")


class KVCache:
    """Keys and values per layer: (G, S, D) arrays that grow as tokens are kept."""

    def __init__(self, n_layers: int):
        self.k: list[np.ndarray | None] = [None] * n_layers
        self.v: list[np.ndarray | None] = [None] * n_layers

    @property
    def length(self) -> int:
        return 0 if self.k[0] is None else self.k[0].shape[1]

    def extend(self, layer: int, k: np.ndarray, v: np.ndarray) -> None:
        self.k[layer] = k if self.k[layer] is None else np.concatenate([self.k[layer], k], axis=1)
        self.v[layer] = v if self.v[layer] is None else np.concatenate([self.v[layer], v], axis=1)

    def keep(self, prefix: int, new_indices) -> None:
        """Rollback: keep the first `prefix` tokens and, after them, the listed new tokens in order."""
        index = np.concatenate([np.arange(prefix), prefix + np.asarray(new_indices, dtype=int)])
        self.k = [None if k is None else k[:, index] for k in self.k]
        self.v = [None if v is None else v[:, index] for v in self.v]


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(variance + eps) * weight


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = np.mean(x, axis=-1, keepdims=True)
    centred = x - mean
    return centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps) * weight + bias


def _attend(q: np.ndarray, layer: int, k: np.ndarray, v: np.ndarray, cache: "KVCache", visible: np.ndarray,
            kv_groups: int) -> np.ndarray:
    """q (H, T, D); k, v (G, T, D) appended to the cache; returns (T, H*D) over visible keys."""
    cache.extend(layer, k, v)
    keys = np.repeat(cache.k[layer], kv_groups, axis=0)  # (H, S, D)
    values = np.repeat(cache.v[layer], kv_groups, axis=0)
    att = q @ keys.transpose(0, 2, 1) * q.shape[-1] ** -0.5  # (H, T, S)
    att = np.where(visible[None], att, -np.inf)  # mask rebuilt from parents
    att = np.exp(att - att.max(axis=-1, keepdims=True))
    att = att / att.sum(axis=-1, keepdims=True)
    heads, n, d = q.shape
    return (att @ values).transpose(1, 0, 2).reshape(n, heads * d)


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def _rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """x: (heads, T, D) rotated at integer positions (T,)."""
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    freqs = np.outer(positions.astype(np.float64), inv_freq)  # (T, D/2)
    angles = np.concatenate([freqs, freqs], axis=-1)  # (T, D)
    return (x * np.cos(angles) + _rotate_half(x) * np.sin(angles)).astype(x.dtype)


def tree_mask(parents) -> np.ndarray:
    """(T, T) boolean: node i sees node j when j is i or one of its ancestors. parents[i] < i, -1 for
    a node whose parent is already in the cache (a chain is parents = [-1, 0, 1, ...])."""
    n = len(parents)
    mask = np.eye(n, dtype=bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] |= mask[parent]
    return mask


def forward(weights: dict, config: ReferenceConfig, tokens, positions, cache: KVCache, parents=None) -> np.ndarray:
    """Logits (T, V) of new tokens at `positions`, attending to the whole cache and, among the new
    tokens, to their ancestors (`parents`; a causal chain when None). The new keys and values are
    appended to the cache in token order; `cache.keep` drops the rejected ones."""
    spec = config.spec
    tokens = np.asarray(tokens, dtype=int)
    positions = np.asarray(positions, dtype=int)
    n = len(tokens)
    parents = list(range(-1, n - 1)) if parents is None else list(parents)
    cached = cache.length
    visible = np.concatenate([np.ones((n, cached), dtype=bool), tree_mask(parents)], axis=1)  # (T, S)
    if spec.family == "opt":
        return _opt_forward(weights, config, tokens, positions, cache, visible)
    h, g, d = spec.n_heads, spec.n_kv_heads, spec.head_dim
    x = weights["model.embed_tokens.weight"][tokens]  # (T, C)
    for layer in range(spec.n_layers):
        p = f"model.layers.{layer}."
        a = _rms_norm(x, weights[p + "input_layernorm.weight"], config.rms_norm_eps)
        q = a @ weights[p + "self_attn.q_proj.weight"].T
        k = a @ weights[p + "self_attn.k_proj.weight"].T
        v = a @ weights[p + "self_attn.v_proj.weight"].T
        if spec.qkv_bias:
            q = q + weights[p + "self_attn.q_proj.bias"]
            k = k + weights[p + "self_attn.k_proj.bias"]
            v = v + weights[p + "self_attn.v_proj.bias"]
        q = q.reshape(n, h, d).transpose(1, 0, 2)  # (H, T, D)
        k = k.reshape(n, g, d).transpose(1, 0, 2)  # (G, T, D)
        v = v.reshape(n, g, d).transpose(1, 0, 2)
        if spec.qk_norm:  # Qwen3: RMSNorm over head_dim before the rotation
            q = _rms_norm(q, weights[p + "self_attn.q_norm.weight"], config.rms_norm_eps)
            k = _rms_norm(k, weights[p + "self_attn.k_norm.weight"], config.rms_norm_eps)
        q, k = _rope(q, positions, config.rope_theta), _rope(k, positions, config.rope_theta)
        out = _attend(q, layer, k, v, cache, visible, h // g) @ weights[p + "self_attn.o_proj.weight"].T
        if spec.o_bias:
            out = out + weights[p + "self_attn.o_proj.bias"]
        x = x + out
        m = _rms_norm(x, weights[p + "post_attention_layernorm.weight"], config.rms_norm_eps)
        gate = m @ weights[p + "mlp.gate_proj.weight"].T
        up = m @ weights[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ weights[p + "mlp.down_proj.weight"].T  # SiLU(gate) * up
    x = _rms_norm(x, weights["model.norm.weight"], config.rms_norm_eps)
    head = weights["model.embed_tokens.weight"] if spec.tied_embeddings else weights["lm_head.weight"]
    return x @ head.T  # (T, V)


def _opt_forward(weights: dict, config: ReferenceConfig, tokens: np.ndarray, positions: np.ndarray,
                 cache: KVCache, visible: np.ndarray) -> np.ndarray:
    """Pre-LN OPT decoder (transformers' OPTDecoder with do_layer_norm_before = True)."""
    spec, eps = config.spec, config.layer_norm_eps
    n, h, d = len(tokens), spec.n_heads, spec.head_dim
    w = weights
    x = w["model.decoder.embed_tokens.weight"][tokens] + w["model.decoder.embed_positions.weight"][
        positions + OPT_POSITION_OFFSET]
    for layer in range(spec.n_layers):
        p = f"model.decoder.layers.{layer}."
        a = _layer_norm(x, w[p + "self_attn_layer_norm.weight"], w[p + "self_attn_layer_norm.bias"], eps)
        q, k, v = (a @ w[p + f"self_attn.{m}_proj.weight"].T + w[p + f"self_attn.{m}_proj.bias"] for m in "qkv")
        q, k, v = (t.reshape(n, h, d).transpose(1, 0, 2) for t in (q, k, v))  # (H, T, D)
        x = x + _attend(q, layer, k, v, cache, visible, 1) @ w[p + "self_attn.out_proj.weight"].T \
            + w[p + "self_attn.out_proj.bias"]
        m = _layer_norm(x, w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"], eps)
        hidden = np.maximum(m @ w[p + "fc1.weight"].T + w[p + "fc1.bias"], 0.0)  # ReLU
        x = x + hidden @ w[p + "fc2.weight"].T + w[p + "fc2.bias"]
    x = _layer_norm(x, w["model.decoder.final_layer_norm.weight"], w["model.decoder.final_layer_norm.bias"], eps)
    return x @ w["model.decoder.embed_tokens.weight"].T  # (T, V), tied head


def random_weights(spec: ModelSpec, seed: int = 0, scale: float = 0.05) -> dict:
    """Seeded random float32 weights in Hugging Face names and shapes (for tests and benchmarks):
    norm gains near 1, embeddings of unit scale, everything else N(0, scale)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in checkpoint_tensor_shapes(spec).items():
        if "norm" in name and name.endswith(".weight"):
            value = 1 + rng.normal(0, 0.1, shape)
        elif "embed" in name:
            value = rng.normal(0, 1.0, shape)
        else:
            value = rng.normal(0, scale, shape)
        weights[name] = value.astype(np.float32)
    return weights
