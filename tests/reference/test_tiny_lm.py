"""The reference engine against a deliberately naive second implementation (per-token loops, no
cache), tree forwards against sequential forwards along every path, and rollback."""

import math

import numpy as np
import pytest

from dfvg_dse.reference import KVCache, ReferenceConfig, forward, random_weights, tree_mask
from dfvg_dse.specs import ModelSpec
from dfvg_dse.specs.rope import RopeSpec

SHAPES = {
    "llama": dict(family="llama", n_heads=4, n_kv_heads=4),
    "mistral": dict(family="mistral", n_heads=4, n_kv_heads=2),
    "qwen2": dict(family="qwen2", n_heads=4, n_kv_heads=2, qkv_bias=True),
    "qwen3": dict(family="qwen3", n_heads=4, n_kv_heads=1, qk_norm=True, tied_embeddings=True, head_dim=12),
    "llama-biased": dict(family="llama", n_heads=2, n_kv_heads=1, qkv_bias=True, o_bias=True),
    "opt": dict(family="opt", n_heads=4, n_kv_heads=4, gated_ffn=False, norm="layer", tied_embeddings=True,
                qkv_bias=True, o_bias=True, ffn_bias=True, learned_positions=256 + 2),
}


def spec_for(name: str) -> ModelSpec:
    shape = dict(SHAPES[name])
    head_dim = shape.pop("head_dim", 8)
    return ModelSpec(name=name, n_layers=2, d_model=32, head_dim=head_dim, d_ffn=48, vocab_size=50,
                     max_positions=256, **shape)


def naive_opt_logits(w: dict, config: ReferenceConfig, tokens: list[int]) -> np.ndarray:
    """OPT from scratch, token by token, following transformers' OPTDecoderLayer (pre-LN)."""
    s, eps = config.spec, 1e-5
    d = s.head_dim

    def norm(x, name):
        mu = float(np.mean(x))
        var = float(np.mean((x - mu) ** 2))
        return (x - mu) / math.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]

    def lin(x, name):
        return w[name + ".weight"] @ x + w[name + ".bias"]

    xs = [w["model.decoder.embed_tokens.weight"][t].astype(np.float64)
          + w["model.decoder.embed_positions.weight"][pos + 2] for pos, t in enumerate(tokens)]
    for layer in range(s.n_layers):
        p = f"model.decoder.layers.{layer}."
        normed = [norm(x, p + "self_attn_layer_norm") for x in xs]
        qs = [lin(a, p + "self_attn.q_proj") * d ** -0.5 for a in normed]  # transformers scales q
        ks = [lin(a, p + "self_attn.k_proj") for a in normed]
        vs = [lin(a, p + "self_attn.v_proj") for a in normed]
        new = []
        for t, x in enumerate(xs):
            heads = []
            for hh in range(s.n_heads):
                cut = slice(hh * d, (hh + 1) * d)
                scores = [float(qs[t][cut] @ ks[j][cut]) for j in range(t + 1)]
                top = max(scores)
                weights = [math.exp(sc - top) for sc in scores]
                heads.append(sum(wt * vs[j][cut] for j, wt in enumerate(weights)) / sum(weights))
            x = x + lin(np.concatenate(heads), p + "self_attn.out_proj")
            hidden = lin(norm(x, p + "final_layer_norm"), p + "fc1")
            new.append(x + lin(np.array([max(0.0, float(u)) for u in hidden]), p + "fc2"))
        xs = new
    head = w["model.decoder.embed_tokens.weight"]
    return np.stack([head @ norm(x, "model.decoder.final_layer_norm") for x in xs])


def naive_logits(w: dict, config: ReferenceConfig, tokens: list[int]) -> np.ndarray:
    """From scratch, token by token and head by head, with plain Python loops over positions."""
    s = config.spec
    if s.family == "opt":
        return naive_opt_logits(w, config, tokens)
    eps, theta = config.rms_norm_eps, config.rope.theta

    def norm(x, weight):
        return x / math.sqrt(float(np.mean(x * x)) + eps) * weight

    def rotate(vec, pos):
        half = len(vec) // 2
        out = np.empty_like(vec, dtype=np.float64)
        for i in range(half):
            angle = pos / theta ** (2 * i / len(vec))
            c, sn = math.cos(angle), math.sin(angle)
            out[i] = vec[i] * c - vec[i + half] * sn
            out[i + half] = vec[i + half] * c + vec[i] * sn
        return out

    xs = [w["model.embed_tokens.weight"][t].astype(np.float64) for t in tokens]
    for layer in range(s.n_layers):
        p = f"model.layers.{layer}."
        ks, vs, qs = [], [], []
        for pos, x in enumerate(xs):
            a = norm(x, w[p + "input_layernorm.weight"])
            q, k, v = (w[p + f"self_attn.{n}_proj.weight"] @ a for n in "qkv")
            if s.qkv_bias:
                q, k, v = (vec + w[p + f"self_attn.{n}_proj.bias"] for vec, n in zip((q, k, v), "qkv"))
            q = q.reshape(s.n_heads, s.head_dim)
            k = k.reshape(s.n_kv_heads, s.head_dim)
            v = v.reshape(s.n_kv_heads, s.head_dim)
            if s.qk_norm:
                q = np.stack([norm(row, w[p + "self_attn.q_norm.weight"]) for row in q])
                k = np.stack([norm(row, w[p + "self_attn.k_norm.weight"]) for row in k])
            qs.append(np.stack([rotate(row, pos) for row in q]))
            ks.append(np.stack([rotate(row, pos) for row in k]))
            vs.append(v)
        new = []
        for t, x in enumerate(xs):
            heads = []
            for hh in range(s.n_heads):
                g = hh // (s.n_heads // s.n_kv_heads)
                scores = [float(qs[t][hh] @ ks[j][g]) / math.sqrt(s.head_dim) for j in range(t + 1)]
                top = max(scores)
                weights = [math.exp(sc - top) for sc in scores]
                heads.append(sum(wt * vs[j][g] for j, wt in enumerate(weights)) / sum(weights))
            out = w[p + "self_attn.o_proj.weight"] @ np.concatenate(heads)
            if s.o_bias:
                out = out + w[p + "self_attn.o_proj.bias"]
            x = x + out
            m = norm(x, w[p + "post_attention_layernorm.weight"])
            gate, up = w[p + "mlp.gate_proj.weight"] @ m, w[p + "mlp.up_proj.weight"] @ m
            new.append(x + w[p + "mlp.down_proj.weight"] @ (gate / (1 + np.exp(-gate)) * up))
        xs = new
    head = w["model.embed_tokens.weight"] if s.tied_embeddings else w["lm_head.weight"]
    return np.stack([head @ norm(x, w["model.norm.weight"]) for x in xs])


@pytest.mark.parametrize("name", list(SHAPES))
def test_cached_forward_equals_the_naive_implementation(name):
    spec = spec_for(name)
    config = ReferenceConfig(spec, rope=RopeSpec(theta=10000.0), rms_norm_eps=1e-6)
    w = random_weights(spec, seed=1)
    tokens = [3, 17, 5, 42, 8, 0, 21]
    expected = naive_logits(w, config, tokens)
    cache = KVCache(spec.n_layers)
    prefill = forward(w, config, tokens[:4], np.arange(4), cache)  # prompt in one forward
    steps = [forward(w, config, [t], [i], cache) for i, t in enumerate(tokens[4:], 4)]  # then one at a time
    got = np.concatenate([prefill, *steps])
    np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("name", ["llama", "qwen3", "opt"])
def test_tree_forward_equals_the_sequential_forward_along_every_path(name):
    spec = spec_for(name)
    config = ReferenceConfig(spec)
    w = random_weights(spec, seed=2)
    prompt = [1, 2, 3]
    # a tree of 6 draft tokens under the prompt: parents within the new tokens (-1: child of the prompt)
    parents, tokens = [-1, 0, 0, 1, 1, 2], [7, 9, 11, 13, 15, 17]
    depth = [0] * len(parents)
    for i, p in enumerate(parents):
        depth[i] = 0 if p < 0 else depth[p] + 1
    cache = KVCache(spec.n_layers)
    forward(w, config, prompt, np.arange(3), cache)
    tree = forward(w, config, tokens, 3 + np.asarray(depth), cache, parents)
    for node in range(len(tokens)):
        path, j = [], node
        while j >= 0:
            path.append(tokens[j])
            j = parents[j]
        sequential = naive_logits(w, config, prompt + path[::-1])[-1]
        np.testing.assert_allclose(tree[node], sequential, rtol=2e-4, atol=2e-4)


def test_rollback_leaves_the_cache_of_the_accepted_tokens_only():
    spec = spec_for("mistral")
    config = ReferenceConfig(spec)
    w = random_weights(spec, seed=3)
    parents, tokens = [-1, 0, 0, 2, 3], [4, 5, 6, 7, 8]
    cache = KVCache(spec.n_layers)
    forward(w, config, [1, 2], [0, 1], cache)
    forward(w, config, tokens, [2, 3, 3, 4, 5], cache, parents)
    cache.keep(2, [0, 2, 3])  # accepted path: nodes 0 -> 2 -> 3
    fresh = KVCache(spec.n_layers)
    forward(w, config, [1, 2, 4, 6, 7], np.arange(5), fresh)
    for layer in range(spec.n_layers):
        np.testing.assert_allclose(cache.k[layer], fresh.k[layer], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cache.v[layer], fresh.v[layer], rtol=1e-5, atol=1e-6)
    # and the next token sees the same context either way
    np.testing.assert_allclose(forward(w, config, [9], [5], cache), forward(w, config, [9], [5], fresh),
                               rtol=1e-5, atol=1e-5)


def test_tree_mask_from_parents():
    mask = tree_mask([-1, 0, 0, 1])
    assert mask.tolist() == [[True, False, False, False], [True, True, False, False],
                             [True, False, True, False], [True, True, False, True]]


def test_opt_350m_layout_is_refused():
    post_ln = ModelSpec(name="o", family="opt", n_layers=1, d_model=8, n_heads=2, n_kv_heads=2, head_dim=4, d_ffn=8,
                        vocab_size=10, max_positions=32, gated_ffn=False, norm="layer", final_norm=False)
    with pytest.raises(ValueError, match="pre-LN OPT"):
        ReferenceConfig(post_ln)
