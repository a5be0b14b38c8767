"""The reference decoder's forward on torch (issue 19): the numpy engine's layers, KV cache, tree
masks and rollback, with weights and activations in float32 or bfloat16 on the CPU or a CUDA device.

Why: on a CPU with avx512_bf16, oneDNN's bfloat16 products of 2-16 rows cost about one row's
(docs/reference.md), so verifying a few tokens is nearly free, as on a GPU; numpy's OpenBLAS pays
1.4-4.9x. The numpy engine stays the parity reference (transformers to 2e-7); this one is checked
against it (float32: the same tokens; bfloat16: logits within a stated bound) and against itself
(bfloat16 speculative output = its own autoregressive output).

Numerics follow transformers' half-precision path: weights, activations and the KV cache in the
dtype; norms, attention scores and softmax in float32, cast back; the logits in the dtype, returned
as float32 numpy. Every row is computed as it would be alone (products and norms are row-wise and
oneDNN's bfloat16 GEMM gives the same bits for a row at any row count, tested), which keeps
verification lossless within the backend.

torch is imported inside the functions, so the package imports without it."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from dfvg_dse.reference.rope import rope_tables
from dfvg_dse.reference.tiny_lm import (OPT_POSITION_OFFSET, KVCache, PackedLayer, PackedWeights, ReferenceConfig,
                                        _half_swap, forward_shape, mask_bias)
from dfvg_dse.reference.torch_bench import check_torch_device, torch_module
from dfvg_dse.specs.backend import ReferenceBackend

_LINEAR = {"qkv", "out", "up", "down"}  # PackedLayer matrices, (in, out) in the numpy layout


@dataclass(frozen=True)
class TorchWeights:
    """What a stage process receives: the numpy engine's packed float32 weights and the backend
    that runs them (tensors are made in the process that runs them)."""

    packed: PackedWeights
    backend: ReferenceBackend


class _Tensors:
    """PackedWeights as torch tensors: linear weights back to (out, in) for F.linear, norms and
    biases in the dtype."""

    def __init__(self, packed: PackedWeights, backend: ReferenceBackend):
        torch = torch_module()
        self.device, self.dtype = check_torch_device(backend.device), getattr(torch, backend.dtype)

        def tensor(array, transpose=False):
            if array is None:
                return None
            array = np.ascontiguousarray(array.T if transpose else array, dtype=np.float32)
            return torch.from_numpy(array).to(device=self.device, dtype=self.dtype)

        def layer(p: PackedLayer) -> dict:
            out = {}
            for f in fields(PackedLayer):
                value = getattr(p, f.name)
                if isinstance(value, tuple):
                    out[f.name] = tuple(tensor(v) for v in value)
                elif isinstance(value, bool):
                    out[f.name] = value
                else:
                    out[f.name] = tensor(value, transpose=f.name in _LINEAR)
            return out

        self.embed = tensor(packed.embed)
        self.positions = tensor(packed.positions)
        self.layers = tuple(layer(p) for p in packed.layers)
        self.final_norm = tuple(tensor(v) for v in packed.final_norm)
        self.head = tensor(packed.head, transpose=True)  # (V, C)


class TorchKVCache(KVCache):
    """The numpy KVCache (preallocated, appended in place, capacity doubling, rollback by
    compacting the kept rows) on torch tensors of the forward's dtype and device."""

    @staticmethod
    def _zeros(shape: tuple, like):
        return torch_module().zeros(shape, dtype=like.dtype, device=like.device)

    @property
    def k(self) -> list:
        """Per layer (G, S, D) float32 numpy copies of the cached keys (for tests)."""
        return [None if t is None else t.float().cpu().numpy() for t in super().k]

    @property
    def v(self) -> list:
        return [None if t is None else t.float().cpu().numpy() for t in super().v]


def _rms_norm(x, weight, eps: float):
    """RMSNorm over the last axis in float32, cast back to x's dtype (transformers' half-precision
    path); also Qwen3's per-head norm of q and k."""
    h = x.float()
    return weight * (h * torch_module().rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _norm(x, weight_bias: tuple, config: ReferenceConfig):
    """RMSNorm, or LayerNorm in float32 cast back to x's dtype."""
    weight, bias = weight_bias
    if bias is None:
        return _rms_norm(x, weight, config.rms_norm_eps)
    h = torch_module().nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(),
                                                config.layer_norm_eps)
    return h.to(x.dtype)


def _attend(q, keys, values, mask_bias):
    """The numpy engine's grouped attention (no kv repeat) in float32: q (H, T, D), keys and values
    (G, S, D); returns (T, H*D) in q's dtype."""
    heads, n, d = q.shape
    groups = keys.shape[0]
    grouped = q.float().reshape(groups, heads // groups * n, d)
    att = grouped @ keys.float().transpose(1, 2) * d ** -0.5
    if mask_bias is not None:
        att = att + mask_bias
    att = att.softmax(dim=-1)
    return (att @ values.float()).reshape(heads, n, d).transpose(0, 1).reshape(n, heads * d).to(q.dtype)


def _linear(x, weight, bias):
    return torch_module().nn.functional.linear(x, weight, bias)


def linear_pass_runner(weights: TorchWeights):
    """(inputs of `rows` rows per input width, one pass over every linear layer and the LM head) on
    the backend, for microbench.linear_row_times: the products a forward of `rows` tokens runs."""
    torch = torch_module()
    w = _Tensors(weights.packed, weights.backend)
    matrices = [(layer[name], layer[f"{name}_bias"]) for layer in w.layers for name in ("qkv", "out", "up", "down")]
    matrices.append((w.head, None))
    generator = torch.Generator().manual_seed(0)

    def inputs(rows: int) -> dict:
        return {m.shape[1]: torch.randn(rows, m.shape[1], generator=generator).to(device=w.device, dtype=w.dtype)
                for m, _ in matrices}

    def run(x: dict) -> None:
        with torch.inference_mode():
            for matrix, bias in matrices:
                _linear(x[matrix.shape[1]], matrix, bias)
        if w.device.type == "cuda":
            torch.cuda.synchronize(w.device)
    return inputs, run


def torch_forward(w: _Tensors, config: ReferenceConfig, tokens, positions, cache: TorchKVCache, parents=None, *,
                  inputs=None, cache_visible=None, with_features: bool = False):
    """tiny_lm.forward's contract on torch: float32 numpy logits (T, V) (and the final-norm hidden
    states with `with_features`)."""
    torch = torch_module()
    tokens, positions, h, g, d = forward_shape(config, tokens, positions)
    n, cached = len(tokens), cache.length
    with torch.no_grad():
        if inputs is None:
            x = w.embed[torch.from_numpy(tokens).to(w.device)]
        else:
            x = torch.from_numpy(np.asarray(inputs, dtype=np.float32)).to(device=w.device, dtype=w.dtype)
        bias = None if n == 1 and cache_visible is None else \
            torch.from_numpy(mask_bias(parents, n, cached, h // g, np.float32, cache_visible)).to(w.device)
        cos = sin = None
        if w.positions is not None:
            x = x + w.positions[torch.from_numpy(positions + OPT_POSITION_OFFSET).to(w.device)]
        else:
            cos, sin = (torch.from_numpy(t).to(device=w.device, dtype=w.dtype)
                        for t in rope_tables(config.rope, positions, d, np.float32, per_token=parents is not None))
            swap = torch.from_numpy(_half_swap(d)).to(w.device)
        cache.reserve(n, g, d, x)
        for index, layer in enumerate(w.layers):
            qkv = _linear(_norm(x, layer["norm1"], config), layer["qkv"], layer["qkv_bias"])
            q = qkv[:, :h * d].reshape(n, h, d).transpose(0, 1)
            k = qkv[:, h * d:(h + g) * d].reshape(n, g, d).transpose(0, 1)
            v = qkv[:, (h + g) * d:].reshape(n, g, d).transpose(0, 1)
            if layer["q_norm"] is not None:
                q = _rms_norm(q, layer["q_norm"], config.rms_norm_eps)
                k = _rms_norm(k, layer["k_norm"], config.rms_norm_eps)
            if cos is not None:
                q = q * cos + q[..., swap] * sin
                k = k * cos + k[..., swap] * sin
            keys, values = cache.write(index, cached, k, v)
            x = x + _linear(_attend(q, keys, values, bias), layer["out"], layer["out_bias"])
            up = _linear(_norm(x, layer["norm2"], config), layer["up"], layer["up_bias"])
            if layer["gated"]:
                gate, up = up.chunk(2, dim=-1)
                hidden = torch.nn.functional.silu(gate) * up
            else:
                hidden = torch.relu(up)
            x = x + _linear(hidden, layer["down"], layer["down_bias"])
        cache.length = cached + n
        hidden = _norm(x, w.final_norm, config)
        logits = _linear(hidden, w.head, None).float().cpu().numpy()
        if with_features:
            return logits, hidden.float().cpu().numpy()
        return logits


class TorchModel:
    """Model's contract (weights, config, cache, fresh, run) on torch: `weights` is the TorchWeights
    a stage process is sent; the tensors are made once per process and shared by `fresh` copies."""

    def __init__(self, weights: TorchWeights, config: ReferenceConfig, tensors: _Tensors | None = None):
        self.weights, self.config = weights, config
        self.tensors = tensors if tensors is not None else _Tensors(weights.packed, weights.backend)
        self.cache = TorchKVCache(config.spec.n_layers)

    def fresh(self) -> "TorchModel":
        return TorchModel(self.weights, self.config, self.tensors)

    def run(self, tokens, positions, parents=None, with_features: bool = False):
        return torch_forward(self.tensors, self.config, tokens, positions, self.cache, parents,
                             with_features=with_features)
