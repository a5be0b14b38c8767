"""Counts against independent computations: a state-dict enumeration and hand-derived values."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dfvg_dse.costs import chain_tree_pairs, forward_work, param_counts
from dfvg_dse.specs import ModelSpec


def hf_state_dict_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of the checkpoint, written from the transformers modelling files by module name.

    This enumerates tensors one by one (the way a state dict lists them) instead of using the
    closed-form sums in costs/work.py, so a slip in either shows up as a mismatch.
    """
    d, h, kv, dh, f, v, n_layers = (spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.d_ffn,
                                    spec.vocab_size, spec.n_layers)
    shapes: dict[str, tuple[int, ...]] = {}
    if spec.family == "opt":
        de = spec.d_embed
        shapes["decoder.embed_tokens.weight"] = (v, de)
        shapes["decoder.embed_positions.weight"] = (spec.max_positions + 2, d)
        if de != d:
            shapes["decoder.project_in.weight"] = (d, de)
            shapes["decoder.project_out.weight"] = (de, d)
        if spec.pre_norm:
            shapes["decoder.final_layer_norm.weight"] = (d,)
            shapes["decoder.final_layer_norm.bias"] = (d,)
        for i in range(n_layers):
            p = f"decoder.layers.{i}."
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                shapes[p + f"self_attn.{proj}.weight"] = (d, d)
                shapes[p + f"self_attn.{proj}.bias"] = (d,)
            for norm in ("self_attn_layer_norm", "final_layer_norm"):
                shapes[p + f"{norm}.weight"] = (d,)
                shapes[p + f"{norm}.bias"] = (d,)
            shapes[p + "fc1.weight"], shapes[p + "fc1.bias"] = (f, d), (f,)
            shapes[p + "fc2.weight"], shapes[p + "fc2.bias"] = (d, f), (d,)
        return shapes  # lm_head is tied to embed_tokens in OPTForCausalLM
    shapes["model.embed_tokens.weight"] = (v, d)
    shapes["model.norm.weight"] = (d,)
    for i in range(n_layers):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = (h * dh, d)
        shapes[p + "self_attn.k_proj.weight"] = (kv * dh, d)
        shapes[p + "self_attn.v_proj.weight"] = (kv * dh, d)
        shapes[p + "self_attn.o_proj.weight"] = (d, h * dh)
        if spec.qkv_bias:
            shapes[p + "self_attn.q_proj.bias"] = (h * dh,)
            shapes[p + "self_attn.k_proj.bias"] = (kv * dh,)
            shapes[p + "self_attn.v_proj.bias"] = (kv * dh,)
        if spec.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (d,)
        if spec.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (dh,)
            shapes[p + "self_attn.k_norm.weight"] = (dh,)
        shapes[p + "mlp.gate_proj.weight"] = (f, d)
        shapes[p + "mlp.up_proj.weight"] = (f, d)
        shapes[p + "mlp.down_proj.weight"] = (d, f)
        shapes[p + "input_layernorm.weight"] = (d,)
        shapes[p + "post_attention_layernorm.weight"] = (d,)
    if not spec.tied_embeddings:
        shapes["lm_head.weight"] = (v, d)
    return shapes


def test_param_counts_equal_state_dict_enumeration_for_every_shipped_model(catalog):
    for entry in catalog.model_entries():
        shapes = hf_state_dict_shapes(entry.spec)
        assert param_counts(entry.spec).total == sum(int(np.prod(s)) for s in shapes.values()), entry.spec.name


@pytest.mark.parametrize("name, exact", [
    # Hand-derived: 2 x 32000 x 4096 + 32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 4096
    ("llama-2-7b", 6_738_415_616),
    # 2 x 151936 x 4096 + 36 x (4096 x 4096 x 2 + 2 x 4096 x 1024 + 3 x 4096 x 12288 + 2 x 4096 + 2 x 128) + 4096
    ("qwen3-8b", 8_190_735_360),
    # 50272 x 5120 + 2050 x 5120 + 40 x (4 (5120^2 + 5120) + 2 x 5120 x 20480 + 20480 + 5120 + 4 x 5120) + 2 x 5120
    ("opt-13b", 12_853_473_280),
    # OPT-350M: 512-wide embedding with project_in/out, post-LN (no final layer norm)
    ("opt-350m", 331_196_416),
])
def test_param_counts_hand_derived(catalog, name, exact):
    assert param_counts(catalog.model(name)).total == exact


TINY = ModelSpec(name="tiny", family="llama", n_layers=2, d_model=8, n_heads=2, n_kv_heads=1, head_dim=4, d_ffn=16,
                 vocab_size=10, max_positions=64)


def test_forward_flops_and_bytes_hand_derived():
    # matmul weights per layer: q 8x8 + k,v 2 x 8x4 + o 8x8 + 3 x 8x16 = 576; 2 layers + head 8x10 = 1232
    work = forward_work(TINY, n_tokens=3, context_tokens=5, batch=2)
    assert work.linear_flops == 2 * 2 * 3 * 1232
    # attention: 4 b L h dh (n c + n(n+1)/2) = 4*2*2*2*4*(15 + 6)
    assert work.attention_flops == 4 * 2 * 2 * 2 * 4 * 21
    # streamed weights: every parameter but the embedding table (untied head streamed), fp16
    total = 2 * 10 * 8 + 2 * (576 + 2 * 8) + 8
    assert work.weight_bytes == (total - 80) * 2
    kv_token = 2 * 2 * 1 * 4 * 2  # K and V, layers, kv heads, head_dim, fp16
    assert work.kv_read_bytes == 2 * 5 * kv_token and work.kv_write_bytes == 2 * 3 * kv_token


def test_tied_head_is_streamed_once():
    tied = ModelSpec(**{**TINY.__dict__, "tied_embeddings": True})
    counts = param_counts(tied)
    assert counts.total == param_counts(TINY).total - 80
    assert counts.read_per_forward == param_counts(TINY).read_per_forward


def _mask_pairs(parents: list[int]) -> int:
    """Brute force: count the ones of the tree attention mask (node attends to itself and ancestors)."""
    n = len(parents)
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parents[j]
    return int(mask.sum())


@given(st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=40))
def test_tree_pairs_of_a_chain_match_the_mask(draws):
    n = len(draws)
    assert chain_tree_pairs(n) == _mask_pairs(list(range(-1, n - 1)))
    # any tree in topological order: parent index below the node's own
    parents = [-1] + [draw % i for i, draw in zip(range(1, n), draws[1:])]
    pairs = _mask_pairs(parents)
    work = forward_work(TINY, n, 7, 1, tree_pairs=pairs)
    assert work.attention_flops == 4 * 2 * 2 * 4 * (n * 7 + pairs)
    assert n <= pairs <= chain_tree_pairs(n)


def test_forward_work_broadcasts_arrays():
    n = np.array([1, 2, 4])[:, None]
    c = np.array([0, 100])[None, :]
    work = forward_work(TINY, n, c, 1)
    assert work.flops.shape == (3, 2) and work.bytes.shape == (3, 2)
    assert np.all(np.diff(work.flops, axis=0) > 0) and np.all(np.diff(work.bytes, axis=1) > 0)
