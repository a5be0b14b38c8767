"""Tensor names and shapes of a Hugging Face checkpoint of each family the reference engine runs.

One table serves the checkpoint reader (every tensor present, with its shape) and the reference
engine's random test weights, so the two can never disagree about a name."""

from __future__ import annotations

from dfvg_dse.specs.model import ModelSpec


def _llama_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    d, h, g, hd, f, v = spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.d_ffn, spec.vocab_size
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    for i in range(spec.n_layers):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (h * hd, d), p + "self_attn.k_proj.weight": (g * hd, d),
                       p + "self_attn.v_proj.weight": (g * hd, d), p + "self_attn.o_proj.weight": (d, h * hd),
                       p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                       p + "mlp.down_proj.weight": (d, f), p + "input_layernorm.weight": (d,),
                       p + "post_attention_layernorm.weight": (d,)})
        if spec.qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (h * hd,), p + "self_attn.k_proj.bias": (g * hd,),
                           p + "self_attn.v_proj.bias": (g * hd,)})
        if spec.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (d,)
        if spec.qk_norm:
            shapes.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
    if not spec.tied_embeddings:
        shapes["lm_head.weight"] = (v, d)
    return shapes


def _opt_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Pre-LN OPT (transformers' OPTForCausalLM names); the head is tied to embed_tokens."""
    d, f, v = spec.d_model, spec.d_ffn, spec.vocab_size
    rows = spec.learned_positions or spec.max_positions + 2
    shapes = {"model.decoder.embed_tokens.weight": (v, d), "model.decoder.embed_positions.weight": (rows, d),
              "model.decoder.final_layer_norm.weight": (d,), "model.decoder.final_layer_norm.bias": (d,)}
    for i in range(spec.n_layers):
        p = f"model.decoder.layers.{i}."
        for m in ("q", "k", "v", "out"):
            shapes.update({p + f"self_attn.{m}_proj.weight": (d, d), p + f"self_attn.{m}_proj.bias": (d,)})
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            shapes.update({p + f"{norm}.weight": (d,), p + f"{norm}.bias": (d,)})
        shapes.update({p + "fc1.weight": (f, d), p + "fc1.bias": (f,), p + "fc2.weight": (d, f), p + "fc2.bias": (d,)})
    return shapes


def checkpoint_tensor_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor name a checkpoint of `spec` holds, with its shape (llama-like families or OPT)."""
    return _opt_shapes(spec) if spec.family == "opt" else _llama_shapes(spec)
