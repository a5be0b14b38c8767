"""Counts against independent computations: a state-dict enumeration and hand-derived values."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dfvg_dse.costs import chain_tree_pairs, forward_work, param_counts
from dfvg_dse.specs import ModelSpec


def hf_state_dict_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of a checkpoint, from the raw config.json fields, by module name.

    Written from the transformers modelling files (modeling_llama / _mistral / _qwen2 / _qwen3 /
    _opt) and reading the config directly, not the ModelSpec, so a slip in the config mapping or in
    the closed-form sums of costs/work.py shows up as a mismatch.
    """
    family = cfg["model_type"]
    d, h, n_layers, v = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"], cfg["vocab_size"]
    shapes: dict[str, tuple[int, ...]] = {}
    if family == "opt":
        f, de = cfg["ffn_dim"], cfg.get("word_embed_proj_dim") or d
        affine, bias = cfg.get("layer_norm_elementwise_affine", True), cfg.get("enable_bias", True)
        norm = {"weight": (d,), "bias": (d,)} if affine else {}
        shapes["decoder.embed_tokens.weight"] = (v, de)
        shapes["decoder.embed_positions.weight"] = (cfg["max_position_embeddings"] + 2, d)
        if de != d:
            shapes["decoder.project_in.weight"] = (d, de)
            shapes["decoder.project_out.weight"] = (de, d)
        if cfg.get("do_layer_norm_before", True) and not cfg.get("_remove_final_layer_norm", False):
            shapes.update({f"decoder.final_layer_norm.{k}": s for k, s in norm.items()})
        for i in range(n_layers):
            p = f"decoder.layers.{i}."
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                shapes[p + f"self_attn.{proj}.weight"] = (d, d)
                if bias:
                    shapes[p + f"self_attn.{proj}.bias"] = (d,)
            for name in ("self_attn_layer_norm", "final_layer_norm"):
                shapes.update({p + f"{name}.{k}": s for k, s in norm.items()})
            shapes[p + "fc1.weight"], shapes[p + "fc2.weight"] = (f, d), (d, f)
            if bias:
                shapes[p + "fc1.bias"], shapes[p + "fc2.bias"] = (f,), (d,)
        return shapes  # lm_head is tied to embed_tokens in OPTForCausalLM
    if family in ("deepseek_v3", "gpt_oss"):
        return _own_attention_family_shapes(cfg)
    f = cfg["intermediate_size"]
    kv = cfg.get("num_key_value_heads") or h
    dh = cfg.get("head_dim") or d // h
    qkv_bias = family == "qwen2" or cfg.get("attention_bias", False)
    shapes["model.embed_tokens.weight"] = (v, d)
    shapes["model.norm.weight"] = (d,)
    for i in range(n_layers):
        p = f"model.layers.{i}.self_attn."
        shapes[p + "q_proj.weight"], shapes[p + "o_proj.weight"] = (h * dh, d), (d, h * dh)
        shapes[p + "k_proj.weight"] = shapes[p + "v_proj.weight"] = (kv * dh, d)
        if qkv_bias:
            shapes[p + "q_proj.bias"], shapes[p + "k_proj.bias"], shapes[p + "v_proj.bias"] = (h * dh,), (kv * dh,), (kv * dh,)
        if family in ("llama", "qwen3") and cfg.get("attention_bias", False):
            shapes[p + "o_proj.bias"] = (d,)
        if family in ("qwen3", "qwen3_moe"):
            shapes[p + "q_norm.weight"] = shapes[p + "k_norm.weight"] = (dh,)
        p = f"model.layers.{i}."
        if family == "mixtral":  # MixtralSparseMoeBlock: a router and w1/w3 (in), w2 (out) per expert
            shapes[p + "block_sparse_moe.gate.weight"] = (cfg["num_local_experts"], d)
            for j in range(cfg["num_local_experts"]):
                e = p + f"block_sparse_moe.experts.{j}."
                shapes[e + "w1.weight"] = shapes[e + "w3.weight"] = (f, d)
                shapes[e + "w2.weight"] = (d, f)
        elif family == "qwen3_moe":  # Qwen3MoeSparseMoeBlock: a router and gated experts of moe_intermediate_size
            fe = cfg["moe_intermediate_size"]
            shapes[p + "mlp.gate.weight"] = (cfg["num_experts"], d)
            for j in range(cfg["num_experts"]):
                e = p + f"mlp.experts.{j}."
                shapes[e + "gate_proj.weight"] = shapes[e + "up_proj.weight"] = (fe, d)
                shapes[e + "down_proj.weight"] = (d, fe)
        else:
            shapes[p + "mlp.gate_proj.weight"] = shapes[p + "mlp.up_proj.weight"] = (f, d)
            shapes[p + "mlp.down_proj.weight"] = (d, f)
        shapes[p + "input_layernorm.weight"] = shapes[p + "post_attention_layernorm.weight"] = (d,)
    if not cfg.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (v, d)
    return shapes


def test_param_counts_equal_state_dict_enumeration_for_every_shipped_model(catalog):
    for entry in catalog.model_entries():
        shapes = hf_state_dict_shapes(entry.config)
        assert param_counts(entry.spec).total == sum(int(np.prod(s)) for s in shapes.values()), entry.spec.name


def _own_attention_family_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """DeepSeek-V3 as its safetensors index names the tensors (the FP8 weight_scale_inv tensors
    aside, and the MTP layer 61 apart), and gpt-oss as transformers' GptOssForCausalLM holds them
    dequantised (the checkpoint packs the experts' MXFP4 blocks and scales)."""
    d, h, v = cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,), "lm_head.weight": (v, d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = shapes[p + "post_attention_layernorm.weight"] = (d,)
        if cfg["model_type"] == "deepseek_v3":
            qk, r, c = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
            a = p + "self_attn."
            shapes.update({a + "q_a_proj.weight": (r, d), a + "q_a_layernorm.weight": (r,), a + "q_b_proj.weight": (h * qk, r),
                           a + "kv_a_proj_with_mqa.weight": (c + cfg["qk_rope_head_dim"], d), a + "kv_a_layernorm.weight": (c,),
                           a + "kv_b_proj.weight": (h * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), c),
                           a + "o_proj.weight": (d, h * cfg["v_head_dim"])})
            experts = ([("mlp.", cfg["intermediate_size"])] if i < cfg["first_k_dense_replace"] else
                       [(f"mlp.experts.{j}.", cfg["moe_intermediate_size"]) for j in range(cfg["n_routed_experts"])]
                       + [("mlp.shared_experts.", cfg["moe_intermediate_size"] * cfg["n_shared_experts"])])
            for e, f in experts:
                shapes[p + e + "gate_proj.weight"] = shapes[p + e + "up_proj.weight"] = (f, d)
                shapes[p + e + "down_proj.weight"] = (d, f)
            if i >= cfg["first_k_dense_replace"]:
                shapes[p + "mlp.gate.weight"] = (cfg["n_routed_experts"], d)
                shapes[p + "mlp.gate.e_score_correction_bias"] = (cfg["n_routed_experts"],)
        else:  # gpt_oss
            kv, dh, n, f = cfg["num_key_value_heads"], cfg["head_dim"], cfg["num_local_experts"], cfg["intermediate_size"]
            a = p + "self_attn."
            for proj, rows in (("q_proj", h * dh), ("k_proj", kv * dh), ("v_proj", kv * dh)):
                shapes[a + proj + ".weight"], shapes[a + proj + ".bias"] = (rows, d), (rows,)
            shapes[a + "o_proj.weight"], shapes[a + "o_proj.bias"], shapes[a + "sinks"] = (d, h * dh), (d,), (h,)
            shapes[p + "mlp.router.weight"], shapes[p + "mlp.router.bias"] = (n, d), (n,)
            shapes[p + "mlp.experts.gate_up_proj"], shapes[p + "mlp.experts.gate_up_proj_bias"] = (n, d, 2 * f), (n, 2 * f)
            shapes[p + "mlp.experts.down_proj"], shapes[p + "mlp.experts.down_proj_bias"] = (n, f, d), (n, d)
    return shapes


@pytest.mark.parametrize("name, exact", [
    # Hand-derived: 2 x 32000 x 4096 + 32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 4096
    ("llama-2-7b", 6_738_415_616),
    # 2 x 151936 x 4096 + 36 x (4096 x 4096 x 2 + 2 x 4096 x 1024 + 3 x 4096 x 12288 + 2 x 4096 + 2 x 128) + 4096
    ("qwen3-8b", 8_190_735_360),
    # 50272 x 5120 + 2050 x 5120 + 40 x (4 (5120^2 + 5120) + 2 x 5120 x 20480 + 20480 + 5120 + 4 x 5120) + 2 x 5120
    ("opt-13b", 12_853_473_280),
    # OPT-350M: 512-wide embedding with project_in/out, post-LN (no final layer norm)
    ("opt-350m", 331_196_416),
    # 50272 x 768 + 2050 x 768 + 12 x (4 (768^2 + 768) + 2 x 768 x 3072 + 3072 + 768 + 4 x 768) + 2 x 768
    ("opt-125m", 125_239_296),
    # Qwen2 q/k/v biases: 151936 x 896 + 24 x (896^2 x 2 + 2 x 896 x 128 + 896 + 2 x 128 + 3 x 896 x 4864 + 2 x 896)
    # + 896, embeddings tied
    ("qwen2.5-0.5b", 494_032_768),
    # 128256 x 2048 + 16 x (2 x 2048^2 + 2 x 2048 x 512 + 3 x 2048 x 8192 + 2 x 2048) + 2048, tied
    ("llama-3.2-1b", 1_235_814_400),
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


def test_sliding_window_caps_kv_traffic_and_cache(catalog):
    mistral = catalog.model("mistral-7b")  # config.json: sliding_window 4096
    assert mistral.sliding_window == 4096 and catalog.model("qwen2.5-7b").sliding_window == 0  # use_sliding_window false
    work = forward_work(mistral, 1, np.array([1000, 4096, 32768]), 1)
    per_token = mistral.kv_bytes_per_token
    np.testing.assert_array_equal(work.kv_read_bytes, np.array([1000, 4096, 4096]) * per_token)
    assert work.attention_flops[1] == work.attention_flops[2]
