"""Reader of Hugging Face checkpoint folders for the reference decoder: config.json plus
*.safetensors (sharded or not), through the safetensors numpy API — never pickle. Every tensor
the family needs must be present with its shape; problems are one CatalogError line."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dfvg_dse.catalog._io import read_json
from dfvg_dse.catalog.errors import CatalogError
from dfvg_dse.catalog.models import model_spec_from_hf_config
from dfvg_dse.specs import ModelSpec


def expected_tensors(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Names and shapes of a llama-family checkpoint (llama, mistral, qwen2, qwen3)."""
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


def read_checkpoint(folder: str | Path) -> tuple[dict, ModelSpec, dict]:
    """(config.json, its ModelSpec, float32 tensors by name) of a checkpoint folder."""
    from safetensors.numpy import load_file  # the optional reader of checkpoint tensors

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise CatalogError(f"{folder}: not a checkpoint folder (no config.json)")
    config = read_json(folder / "config.json")
    spec = model_spec_from_hf_config(folder / "config.json", config, folder.name, folder.name, str(folder))
    if spec.family not in ("llama", "mistral", "qwen2", "qwen3"):
        raise CatalogError(f"{folder / 'config.json'}: model_type '{spec.family}' is not run by the reference "
                           "engine yet (llama, mistral, qwen2, qwen3)")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CatalogError(f"{folder}: no *.safetensors file")
    tensors: dict[str, np.ndarray] = {}
    for path in files:
        try:
            tensors.update(load_file(str(path)))
        except Exception as err:  # a truncated or foreign file: safetensors raises its own types
            raise CatalogError(f"{path}: not a readable safetensors file: {err}") from None
    for name, shape in expected_tensors(spec).items():
        if name not in tensors:
            raise CatalogError(f"{folder}: tensor '{name}' missing (config.json needs it)")
        if tuple(tensors[name].shape) != shape:
            raise CatalogError(f"{folder}: tensor '{name}' has shape {tuple(tensors[name].shape)}; "
                               f"config.json implies {shape}")
    return config, spec, {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}
