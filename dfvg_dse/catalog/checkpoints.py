"""Reader of Hugging Face checkpoint folders for the reference decoder: config.json plus
*.safetensors (sharded or not), through the safetensors numpy API — never pickle. Every tensor
the family needs must be present with its shape; problems are one CatalogError line. What the
forward needs beyond the shapes (rotary embedding, RMSNorm eps) comes from `forward_settings`."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from dfvg_dse.catalog._io import check_regular_file, read_json
from dfvg_dse.catalog.errors import CatalogError, DataError
from dfvg_dse.catalog.models import model_spec_from_hf_config
from dfvg_dse.catalog.rope import rope_spec_from_hf_config
from dfvg_dse.specs import ModelSpec
from dfvg_dse.specs.checkpoint import checkpoint_tensor_shapes
from dfvg_dse.specs.rope import RopeSpec

RMS_NORM_EPS_DEFAULT = 1e-6  # LlamaConfig, MistralConfig, Qwen2Config and Qwen3Config's default


class ForwardSettings(NamedTuple):
    """The reference engine's numerics of a checkpoint beyond its shape (ReferenceConfig's fields)."""

    rope: RopeSpec
    rms_norm_eps: float


def forward_settings(folder: str | Path, config: dict, spec: ModelSpec) -> ForwardSettings:
    """Rotary embedding (transformers 4 or 5 style, catalog/rope.py) and RMSNorm eps of a
    checkpoint's config.json (`config`, as read_checkpoint returned it)."""
    path = Path(folder) / "config.json"
    if spec.family == "opt":  # learned positions and LayerNorm: neither applies
        return ForwardSettings(RopeSpec(), RMS_NORM_EPS_DEFAULT)
    eps = config.get("rms_norm_eps")
    eps = RMS_NORM_EPS_DEFAULT if eps is None else eps
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise DataError(path, "config.rms_norm_eps", eps, "must be a number in (0, 1)")
    return ForwardSettings(rope_spec_from_hf_config(path, config, spec.head_dim, spec.max_positions), float(eps))


def read_checkpoint(folder: str | Path) -> tuple[dict, ModelSpec, dict]:
    """(config.json, its ModelSpec, float32 tensors by name) of a checkpoint folder."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise CatalogError(f"{folder}: not a checkpoint folder (no config.json)")
    config = read_json(folder / "config.json")
    spec = model_spec_from_hf_config(folder / "config.json", config, folder.name, folder.name, str(folder))
    if spec.family == "opt" and (not spec.final_norm or not spec.norm_affine
                                 or spec.d_embed not in (0, spec.d_model)):
        raise CatalogError(f"{folder / 'config.json'}: post-LN OPT, OPT without affine norms and OPT with "
                           "word_embed_proj_dim != hidden_size are not run by the reference engine")
    if spec.moe is not None or spec.mla is not None:
        raise CatalogError(f"{folder / 'config.json'}: {spec.family} (mixture of experts) is priced by the cost model "
                           "but not run by the reference engine (llama, mistral, qwen2, qwen3, pre-LN OPT)")
    return config, spec, _tensors(folder, checkpoint_tensor_shapes(spec))


def _tensors(folder: Path, shapes: dict) -> dict[str, np.ndarray]:
    """The folder's safetensors files as float32 arrays, every name of `shapes` present at its shape."""
    from safetensors.numpy import load_file  # the optional reader of checkpoint tensors

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CatalogError(f"{folder}: no *.safetensors file")
    tensors: dict[str, np.ndarray] = {}
    for path in files:
        check_regular_file(path)  # a FIFO or device named *.safetensors: one line, not a read that never ends
        try:
            tensors.update(load_file(str(path)))
        except Exception as err:  # a truncated or foreign file: safetensors raises its own types
            raise CatalogError(f"{path}: not a readable safetensors file: {err}") from None
    for name, shape in shapes.items():
        if name not in tensors:
            raise CatalogError(f"{folder}: tensor '{name}' missing (config.json needs it)")
        if tuple(tensors[name].shape) != shape:
            raise CatalogError(f"{folder}: tensor '{name}' has shape {tuple(tensors[name].shape)}; "
                               f"config.json implies {shape}")
    return {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}


def read_head_checkpoint(folder: str | Path) -> tuple[dict, ModelSpec, dict]:
    """(config.json, the ModelSpec of its decoder layer, float32 tensors) of an EAGLE-style draft head
    folder (models/reference/train_head.py): `architectures` ["EagleHead"], one llama-family layer,
    fc (d x 2d, with a bias), its final norm; the embedding and LM head are its target's, not stored."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise CatalogError(f"{folder}: not a checkpoint folder (no config.json)")
    config = read_json(folder / "config.json")
    if config.get("architectures") != ["EagleHead"] or config.get("num_hidden_layers") != 1:
        raise DataError(folder / "config.json", "architectures", config.get("architectures"),
                        "a draft head folder has [\"EagleHead\"] and num_hidden_layers = 1")
    spec = model_spec_from_hf_config(folder / "config.json", config, folder.name, folder.name, str(folder))
    if spec.family not in ("llama", "mistral", "qwen2", "qwen3"):
        raise DataError(folder / "config.json", "model_type", config.get("model_type"), "a llama-family layer")
    d = spec.d_model
    shapes = {name: shape for name, shape in checkpoint_tensor_shapes(spec).items()
              if name.startswith(("model.layers.0.", "model.norm."))}
    return config, spec, _tensors(folder, {**shapes, "fc.weight": (d, 2 * d), "fc.bias": (d,)})


def read_tokenizer(folder: str | Path):
    """The folder's tokenizer.json through the optional `tokenizers` package, or None when the
    folder has none (byte-level checkpoints need none)."""
    path = Path(folder) / "tokenizer.json"
    check_regular_file(path)  # a FIFO or device there is an error, not "no tokenizer"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CatalogError(f"{path}: reading it needs the optional tokenizers package "
                           "(pip install 'dfvg-dse[tokenizers]'), or pass --prompt-ids") from None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises its own exception type for malformed files
        raise CatalogError(f"{path}: not a tokenizers file ({str(error).splitlines()[0]})") from None
