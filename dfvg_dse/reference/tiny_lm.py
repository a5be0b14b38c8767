"""A small numpy decoder for the reference decoder (issue 6): llama, mistral, qwen2, qwen3 and
pre-LN OPT layers as Hugging Face transformers defines them, a KV cache, tree forwards and rollback.

Shapes follow nanoGPT's comments: T new tokens, S cached + new, H heads, G kv heads, D head_dim.
Rotary embeddings use transformers' rotate_half convention with the checkpoint's base and scaling
(specs.rope; tables from rope.py); Qwen3 normalises q and k per head before rotation; grouped-query
attention repeats each kv head H / G times. The tree mask is built from parents alone (ancestors
first), so this module never imports the analytical tree code: the reference stays an independent
check of it.

OPT (transformers' OPTDecoderLayer): learned positions read at position + 2, LayerNorm (eps 1e-5)
before attention and FFN, ReLU FFN with biases, q scaled by head_dim^-0.5, tied head. Post-LN
OPT-350M and its 512-wide embedding projection are refused rather than guessed.

Speed: weights are packed once (transposed, q/k/v and gate/up fused), the KV cache is preallocated,
rotary tables are built once per forward and grouped-query attention never copies kv heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dfvg_dse.reference.rope import rope_tables
from dfvg_dse.specs import ModelSpec
from dfvg_dse.specs.checkpoint import checkpoint_tensor_shapes
from dfvg_dse.specs.rope import RopeSpec

LLAMA_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
ENGINE_FAMILIES = LLAMA_FAMILIES + ("opt",)
OPT_POSITION_OFFSET = 2  # transformers' OPTLearnedPositionalEmbedding reads row position + 2


@dataclass(frozen=True)
class ReferenceConfig:
    """Shape (a ModelSpec) plus what the forward needs beyond counting: the rotary embedding
    (base and scaling, catalog-read from config.json) and the norm eps."""

    spec: ModelSpec
    rope: RopeSpec = RopeSpec()  # transformers' default: base 10,000, no scaling
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
    """Keys and values of every layer in one preallocated (L, G, capacity, D) array pair: appending
    writes in place (capacity doubles when full) and rollback compacts the kept rows, so a decode
    step never copies the whole cache."""

    def __init__(self, n_layers: int):
        self.n_layers = n_layers
        self.length = 0
        self._k: np.ndarray | None = None
        self._v: np.ndarray | None = None

    @property
    def k(self) -> list[np.ndarray | None]:
        """Per layer (G, S, D) views of the cached keys (None while empty)."""
        return [None if self._k is None else self._k[i, :, :self.length] for i in range(self.n_layers)]

    @property
    def v(self) -> list[np.ndarray | None]:
        return [None if self._v is None else self._v[i, :, :self.length] for i in range(self.n_layers)]

    def reserve(self, new_tokens: int, groups: int, head_dim: int, like) -> None:
        """Room for `new_tokens` more rows before a forward writes them, in the dtype of `like`."""
        need = self.length + new_tokens
        if self._k is not None and need <= self._k.shape[2]:
            return
        capacity = max(64, need, 2 * (0 if self._k is None else self._k.shape[2]))
        k = self._zeros((self.n_layers, groups, capacity, head_dim), like)
        v = self._zeros(k.shape, like)
        if self._k is not None:
            k[:, :, :self.length] = self._k[:, :, :self.length]
            v[:, :, :self.length] = self._v[:, :, :self.length]
        self._k, self._v = k, v

    @staticmethod
    def _zeros(shape: tuple, like):
        return np.zeros(shape, dtype=like.dtype)

    def write(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Store k, v (G, T, D) at rows start.. and return the layer's keys and values up to them."""
        end = start + k.shape[1]
        self._k[layer, :, start:end] = k
        self._v[layer, :, start:end] = v
        return self._k[layer, :, :end], self._v[layer, :, :end]

    def keep(self, prefix: int, new_indices) -> None:
        """Rollback: keep the first `prefix` tokens and, after them, the listed new tokens in order."""
        rows = prefix + np.asarray(new_indices, dtype=int)
        if self._k is not None and len(rows):
            self._k[:, :, prefix:prefix + len(rows)] = self._k[:, :, rows]  # fancy index copies first
            self._v[:, :, prefix:prefix + len(rows)] = self._v[:, :, rows]
        self.length = prefix + len(rows)


# np.add.reduce rather than np.mean: the same sum, without np.mean's Python-level wrapper, which
# costs more than the arithmetic on a 128-256-wide row (a third of a draft forward).
def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    variance = np.add.reduce(x * x, axis=-1, keepdims=True) / x.shape[-1]
    return x / np.sqrt(variance + eps) * weight


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    centred = x - np.add.reduce(x, axis=-1, keepdims=True) / x.shape[-1]
    variance = np.add.reduce(centred * centred, axis=-1, keepdims=True) / x.shape[-1]
    return centred / np.sqrt(variance + eps) * weight + bias


@lru_cache(maxsize=16)
def _half_swap(dim: int) -> np.ndarray:
    """Index that swaps the two halves of the last axis (rotate_half without its sign)."""
    return np.concatenate([np.arange(dim // 2, dim), np.arange(dim // 2)])


def tree_mask(parents) -> np.ndarray:
    """(T, T) boolean: node i sees node j when j is i or one of its ancestors. parents[i] < i, -1 for
    a node whose parent is already in the cache (a chain is parents = [-1, 0, 1, ...])."""
    n = len(parents)
    mask = np.eye(n, dtype=bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] |= mask[parent]
    return mask


@dataclass(frozen=True)
class PackedLayer:
    """One decoder layer laid out for the forward: projections transposed to (in, out) and
    C-contiguous (OpenBLAS runs x @ W 5-10x faster than x @ W.T for 2-16 rows), q, k and v fused
    into one matmul, and a gated FFN's gate and up fused into another. Biases and norms are None
    where the family has none (norm biases are None for RMSNorm)."""

    norm1: tuple[np.ndarray, np.ndarray | None]
    qkv: np.ndarray
    qkv_bias: np.ndarray | None
    q_norm: np.ndarray | None
    k_norm: np.ndarray | None
    out: np.ndarray
    out_bias: np.ndarray | None
    norm2: tuple[np.ndarray, np.ndarray | None]
    gated: bool  # SiLU(gate) * up (llama families) or ReLU (OPT)
    up: np.ndarray  # (C, 2F) gate then up when gated, else (C, F)
    up_bias: np.ndarray | None
    down: np.ndarray
    down_bias: np.ndarray | None


@dataclass(frozen=True)
class PackedWeights:
    """A checkpoint laid out for `forward`: made once per model by `pack_weights`."""

    embed: np.ndarray  # (V, C)
    positions: np.ndarray | None  # OPT's learned position table, None for rotary families
    layers: tuple[PackedLayer, ...]
    final_norm: tuple[np.ndarray, np.ndarray | None]
    head: np.ndarray  # (C, V)


def _t(matrix: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(matrix.T)


def pack_weights(weights: dict, config: ReferenceConfig) -> PackedWeights:
    """Hugging Face tensors (by name) in the engine's layout; the checkpoint's values are not changed."""
    spec, w = config.spec, weights
    if spec.family == "opt":
        layers = []
        for i in range(spec.n_layers):
            p = f"model.decoder.layers.{i}."
            layers.append(PackedLayer(
                norm1=(w[p + "self_attn_layer_norm.weight"], w[p + "self_attn_layer_norm.bias"]),
                qkv=_t(np.concatenate([w[p + f"self_attn.{m}_proj.weight"] for m in "qkv"])),
                qkv_bias=np.concatenate([w[p + f"self_attn.{m}_proj.bias"] for m in "qkv"]), q_norm=None, k_norm=None,
                out=_t(w[p + "self_attn.out_proj.weight"]), out_bias=w[p + "self_attn.out_proj.bias"],
                norm2=(w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"]),
                gated=False, up=_t(w[p + "fc1.weight"]), up_bias=w[p + "fc1.bias"], down=_t(w[p + "fc2.weight"]),
                down_bias=w[p + "fc2.bias"]))
        embed = w["model.decoder.embed_tokens.weight"]
        return PackedWeights(embed, w["model.decoder.embed_positions.weight"], tuple(layers),
                             (w["model.decoder.final_layer_norm.weight"], w["model.decoder.final_layer_norm.bias"]),
                             _t(embed))  # tied head
    layers = [llama_layer(w, f"model.layers.{i}.", spec) for i in range(spec.n_layers)]
    embed = w["model.embed_tokens.weight"]
    return PackedWeights(embed, None, tuple(layers), (w["model.norm.weight"], None),
                         _t(embed if spec.tied_embeddings else w["lm_head.weight"]))


def llama_layer(w: dict, p: str, spec) -> PackedLayer:
    """One llama-family decoder layer's tensors (names under the prefix `p`) in the engine's layout."""
    a = p + "self_attn."
    return PackedLayer(
        norm1=(w[p + "input_layernorm.weight"], None),
        qkv=_t(np.concatenate([w[a + f"{m}_proj.weight"] for m in "qkv"])),
        qkv_bias=np.concatenate([w[a + f"{m}_proj.bias"] for m in "qkv"]) if spec.qkv_bias else None,
        q_norm=w[a + "q_norm.weight"] if spec.qk_norm else None,
        k_norm=w[a + "k_norm.weight"] if spec.qk_norm else None,
        out=_t(w[a + "o_proj.weight"]), out_bias=w[a + "o_proj.bias"] if spec.o_bias else None,
        norm2=(w[p + "post_attention_layernorm.weight"], None),
        gated=True, up=_t(np.concatenate([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]])), up_bias=None,
        down=_t(w[p + "mlp.down_proj.weight"]), down_bias=None)


def _norm(x: np.ndarray, weight_bias: tuple, config: ReferenceConfig) -> np.ndarray:
    weight, bias = weight_bias
    if bias is None:
        return _rms_norm(x, weight, config.rms_norm_eps)
    return _layer_norm(x, weight, bias, config.layer_norm_eps)


# OpenBLAS runs a product of at most about 1e6 multiply-adds (rows x inner x columns) through its
# small-matrix kernel, 2-4x faster for 2-16 rows than its general gemm (measured here with one
# thread, /tmp-free: benchmarks/reference_speed.py). A wider product is split into column blocks
# that each stay under the limit.
SMALL_GEMM_MACS = 1_000_000


def _linear(x: np.ndarray, matrix: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    rows, inner = x.shape
    columns = matrix.shape[1]
    blocks = -(-rows * inner * columns // SMALL_GEMM_MACS)
    if rows == 1 or blocks <= 1:
        y = x @ matrix
    else:
        step = -(-columns // blocks)
        y = np.concatenate([x @ matrix[:, i:i + step] for i in range(0, columns, step)], axis=1)
    return y if bias is None else y + bias


def _attend(q: np.ndarray, keys: np.ndarray, values: np.ndarray, mask_bias: np.ndarray | None) -> np.ndarray:
    """q (H, T, D) over keys and values (G, S, D), H a multiple of G, without repeating the kv heads:
    the H / G query heads of a group share one batched matmul. `mask_bias` (H/G*T, S) is 0 where a
    token may look and -inf elsewhere (None: everything is visible). Returns (T, H*D)."""
    heads, n, d = q.shape
    groups = keys.shape[0]
    grouped = q.reshape(groups, heads // groups * n, d)  # (G, r*T, D): heads of one group stacked
    att = grouped @ keys.transpose(0, 2, 1)  # (G, r*T, S)
    att *= d ** -0.5
    if mask_bias is not None:
        att += mask_bias
    att = np.exp(att - att.max(axis=-1, keepdims=True))
    att /= att.sum(axis=-1, keepdims=True)
    return (att @ values).reshape(heads, n, d).transpose(1, 0, 2).reshape(n, heads * d)


def mask_bias(parents, n: int, cached: int, repeats: int, dtype, cache_visible=None) -> np.ndarray:
    """The additive attention mask of a forward, built once for all its layers: new token i sees
    the cache (the rows `cache_visible[i]` marks, or all) and its tree ancestors (`parents`; a causal
    chain when None), stacked `repeats` times for the query heads that share a kv head."""
    seen = np.ones((n, cached), dtype=bool) if cache_visible is None else np.asarray(cache_visible, dtype=bool)
    visible = np.concatenate([seen,
                              tree_mask(list(range(-1, n - 1)) if parents is None else list(parents))], axis=1)
    return np.tile(np.where(visible, 0.0, -np.inf).astype(dtype), (repeats, 1))


def forward_shape(config: ReferenceConfig, tokens, positions) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """A forward's token ids and positions as arrays, and its heads, kv heads and head_dim."""
    spec = config.spec
    return np.asarray(tokens, dtype=int), np.asarray(positions, dtype=int), spec.n_heads, spec.n_kv_heads, spec.head_dim


def forward(weights, config: ReferenceConfig, tokens, positions, cache: KVCache, parents=None, *, inputs=None,
            cache_visible=None, with_features: bool = False):
    """Logits (T, V) of new tokens at `positions`, attending to the whole cache and, among the new
    tokens, to their ancestors (`parents`; a causal chain when None). The new keys and values are
    appended to the cache in token order; `cache.keep` drops the rejected ones. `weights` is a
    PackedWeights, or Hugging Face tensors by name (packed on every call: for tests).

    For draft heads (reference/eagle.py): `inputs` (T, C) replaces the token embeddings,
    `cache_visible` (T, cached) says which cached rows each new token sees (default all), and
    `with_features` also returns the final-norm hidden states (T, C), the LM head's input."""
    if not isinstance(weights, PackedWeights):
        weights = pack_weights(weights, config)
    tokens, positions, h, g, d = forward_shape(config, tokens, positions)
    n, cached = len(tokens), cache.length
    x = weights.embed[tokens] if inputs is None else np.asarray(inputs)  # (T, C)
    # a single new token sees the whole cache: no mask needed
    bias = None if n == 1 and cache_visible is None else mask_bias(parents, n, cached, h // g, x.dtype, cache_visible)
    if weights.positions is not None:
        x = x + weights.positions[positions + OPT_POSITION_OFFSET]
        cos = sin = None
    else:
        # a tree's nodes rotate at their own lengths (length-dependent scalings), as decoding them one by one would
        cos, sin = rope_tables(config.rope, positions, d, x.dtype, per_token=parents is not None)
        swap = _half_swap(d)
    cache.reserve(n, g, d, x)
    for index, layer in enumerate(weights.layers):
        qkv = _linear(_norm(x, layer.norm1, config), layer.qkv, layer.qkv_bias)
        q = qkv[:, :h * d].reshape(n, h, d).transpose(1, 0, 2)  # (H, T, D)
        k = qkv[:, h * d:(h + g) * d].reshape(n, g, d).transpose(1, 0, 2)  # (G, T, D)
        v = qkv[:, (h + g) * d:].reshape(n, g, d).transpose(1, 0, 2)
        if layer.q_norm is not None:  # Qwen3: RMSNorm over head_dim before the rotation
            q = _rms_norm(q, layer.q_norm, config.rms_norm_eps)
            k = _rms_norm(k, layer.k_norm, config.rms_norm_eps)
        if cos is not None:
            q = q * cos + q[..., swap] * sin
            k = k * cos + k[..., swap] * sin
        keys, values = cache.write(index, cached, k, v)
        x = x + _linear(_attend(q, keys, values, bias), layer.out, layer.out_bias)
        up = _linear(_norm(x, layer.norm2, config), layer.up, layer.up_bias)
        if layer.gated:  # SiLU(gate) * up
            half = up.shape[1] // 2
            gate, up = up[:, :half], up[:, half:]
            hidden = gate / (1.0 + np.exp(-gate)) * up
        else:  # OPT: ReLU
            hidden = np.maximum(up, 0.0)
        x = x + _linear(hidden, layer.down, layer.down_bias)
    cache.length = cached + n
    hidden = _norm(x, weights.final_norm, config)
    logits = _linear(hidden, weights.head, None)  # (T, V)
    return (logits, hidden) if with_features else logits


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
