"""Parsers of models/: our model files and Hugging Face config.json, into one ModelSpec.

A model file keeps the fields of the checkpoint's config.json verbatim under [config]
(docs/data-format.md), so one mapping serves shipped files and `dfvg-dse models import`.
Family traits follow the transformers implementations: llama (RMSNorm, gated SiLU FFN, optional
attention/MLP biases), mistral (as llama, no biases), qwen2 (q/k/v biases), qwen3 (q/k RMSNorm,
optional attention bias), opt (LayerNorm, ReLU FFN with 2 matrices, biases everywhere, learned
positions with an offset of 2, optional 512-wide embedding projection, post-LN for OPT-350M).
The rotary embedding of the llama-like families is checked here too (catalog/rope.py, both
transformers 4 and 5 config styles), and mixture-of-experts configs are refused: they are not
modelled yet, and reading one as the dense model of the same width would be silently wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dfvg_dse import units
from dfvg_dse.catalog._io import ModelEntry, parse_quantity, read_provenance, read_string
from dfvg_dse.catalog.errors import _MISSING, DataError
from dfvg_dse.catalog.rope import rope_spec_from_hf_config
from dfvg_dse.specs import FAMILIES, MlaSpec, ModelSpec, MoeSpec, SpecError

# OPT's learned position table has max_position_embeddings + 2 rows (transformers'
# OPTLearnedPositionalEmbedding offset).
OPT_POSITION_OFFSET = 2
DTYPE_KEYS = ("torch_dtype", "dtype")  # transformers >= 4.56 writes `dtype`
# Expert counts as transformers' MoE configs name them: Qwen2/3-MoE, Mixtral, DeepSeek-V2/V3, others.
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts",
            "n_experts")
# Largest width, count or length a config key may give (docs/data-format.md, "Reading limits"). Real
# ones are far below (the largest shipped: 152k vocabulary, 131k positions); past it, parameter and
# FLOP counts (products of a few keys) leave float range and print as inf, or fail to convert.
MAX_CONFIG_INT = 2**31 - 1


def _int(path, config: dict, key: str, default: Any = _MISSING) -> int:
    value = config.get(key, default)
    if value is None and default is not _MISSING:  # JSON null means "use the default"
        value = default
    if value is _MISSING:
        raise DataError(path, f"config.{key}", _MISSING, "required by this model family")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DataError(path, f"config.{key}", value, "must be a positive integer")
    if value > MAX_CONFIG_INT:
        raise DataError(path, f"config.{key}", value, f"must be at most {MAX_CONFIG_INT:,} (2^31 - 1)")
    return value


def _bool(path, config: dict, key: str, default: bool) -> bool:
    value = config.get(key, default)
    value = default if value is None else value
    if not isinstance(value, bool):
        raise DataError(path, f"config.{key}", value, "must be true or false")
    return value


def _dtype(path, config: dict) -> str:
    for key in DTYPE_KEYS:
        value = config.get(key)
        if value is not None:
            if not isinstance(value, str) or value not in units.DTYPE_BYTES:
                raise DataError(path, f"config.{key}", value, f"allowed: {', '.join(units.DTYPE_BYTES)}")
            return value
    return "float16"  # config.json without a dtype: transformers loads fp32, but decode runs in half precision


# transformers' config-class defaults for keys a config.json may omit (None: derived below).
KV_HEADS_DEFAULT = {"llama": None, "mistral": 8, "qwen2": 32, "qwen3": 32, "mixtral": 8, "qwen3_moe": 4}
HEAD_DIM_DEFAULT = {"llama": None, "mistral": None, "qwen2": None, "qwen3": 128, "mixtral": None, "qwen3_moe": 128}
# MoE families -> the dense family whose attention and norms they share (None: their own, read by
# OWN_FAMILY_READERS), and their expert keys (experts, experts per token, expert FFN width), as
# transformers' config classes name them.
MOE_FAMILIES = {"mixtral": ("mistral", "num_local_experts", "num_experts_per_tok", "intermediate_size"),
                "qwen3_moe": ("qwen3", "num_experts", "num_experts_per_tok", "moe_intermediate_size"),
                "deepseek_v3": (None, "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
                "gpt_oss": (None, "num_local_experts", "num_experts_per_tok", "intermediate_size")}


def _moe(path, config: dict, family: str, **extra) -> MoeSpec:
    """The routed experts of a MoE config; layouts not modelled (dense layers between) are refused."""
    _, experts, top_k, width = MOE_FAMILIES[family]
    if family == "qwen3_moe":
        if config.get("mlp_only_layers"):
            raise DataError(path, "config.mlp_only_layers", config["mlp_only_layers"], "must be empty (every layer MoE)")
        if _int(path, config, "decoder_sparse_step", 1) != 1:
            raise DataError(path, "config.decoder_sparse_step", config["decoder_sparse_step"], "must be 1 (every layer MoE)")
    count, k = _int(path, config, experts), _int(path, config, top_k)
    if k > count:
        raise DataError(path, f"config.{top_k}", k, f"must be <= {experts} ({count})")
    return MoeSpec(n_experts=count, experts_per_token=k, d_expert=_int(path, config, width), **extra)


def _opt_fields(path, config: dict, hidden: int, heads: int) -> dict:
    bias = _bool(path, config, "enable_bias", True)
    final_norm = _bool(path, config, "do_layer_norm_before", True) and not _bool(
        path, config, "_remove_final_layer_norm", False)
    return dict(d_ffn=_int(path, config, "ffn_dim"), n_kv_heads=heads, head_dim=hidden // heads,
                tied_embeddings=True, gated_ffn=False, qkv_bias=bias, o_bias=bias, ffn_bias=bias, norm="layer",
                norm_affine=_bool(path, config, "layer_norm_elementwise_affine", True), final_norm=final_norm,
                d_embed=_int(path, config, "word_embed_proj_dim", hidden),
                learned_positions=_int(path, config, "max_position_embeddings") + OPT_POSITION_OFFSET)


# gpt-oss's experts in MXFP4 (OCP Microscaling spec v1.0): a 4-bit E2M1 value per weight and one
# 8-bit E8M0 scale per block of 32, 4 + 8/32 bits; attention, router, embedding and head stay bf16.
MXFP4_BITS = 4.0 + 8.0 / 32.0


def _quant_method(config: dict) -> str | None:
    """quantization_config.quant_method: "fp8" (DeepSeek-V3's linear weights in e4m3, one scale per
    128 x 128 block), "mxfp4" (gpt-oss's experts) or another method, which is not read."""
    quant = config.get("quantization_config")
    return quant.get("quant_method") if isinstance(quant, dict) else None


def _deepseek_v3_fields(path, config: dict, hidden: int, heads: int) -> dict:
    """DeepSeek-V3: multi-head latent attention, `first_k_dense_replace` dense layers then MoE layers
    of routed and shared experts with a score-correction bias, and MTP modules (transformers'
    DeepseekV3Config key names)."""
    for key, allowed in (("moe_layer_freq", 1), ("attention_bias", False)):
        if config.get(key, allowed) not in (allowed, None):
            raise DataError(path, f"config.{key}", config[key], f"must be {str(allowed).lower()} (the layout modelled)")
    mla = MlaSpec(q_lora_rank=config.get("q_lora_rank") and _int(path, config, "q_lora_rank") or 0,
                  kv_lora_rank=_int(path, config, "kv_lora_rank"), qk_nope_head_dim=_int(path, config, "qk_nope_head_dim"),
                  qk_rope_head_dim=_int(path, config, "qk_rope_head_dim"), v_head_dim=_int(path, config, "v_head_dim"))
    dense = config.get("first_k_dense_replace", 0)
    if isinstance(dense, bool) or not isinstance(dense, int) or not 0 <= dense <= _int(path, config, "num_hidden_layers"):
        raise DataError(path, "config.first_k_dense_replace", dense, "must be an integer in 0..num_hidden_layers")
    mtp = config.get("num_nextn_predict_layers", 0)
    if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
        raise DataError(path, "config.num_nextn_predict_layers", mtp, "must be an integer >= 0")
    shared = config.get("n_shared_experts", 0) or 0
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        raise DataError(path, "config.n_shared_experts", shared, "must be an integer >= 0")
    moe = _moe(path, config, "deepseek_v3", dense_layers=dense, n_shared=shared, router_bias=True)
    return dict(d_ffn=_int(path, config, "intermediate_size"), n_kv_heads=heads, head_dim=mla.qk_head_dim, mla=mla,
                tied_embeddings=_bool(path, config, "tie_word_embeddings", False), moe=moe, mtp_layers=mtp)


def _gpt_oss_fields(path, config: dict, hidden: int, heads: int) -> dict:
    """gpt-oss: attention with biases and a learned sink per head, sliding-window and full layers as
    `layer_types` lists them, and biased experts under a biased router (transformers' GptOssConfig)."""
    layers = _int(path, config, "num_hidden_layers")
    kinds = config.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or set(kinds) - {"sliding_attention", "full_attention"}:
        raise DataError(path, "config.layer_types", kinds, f"must list {layers} of sliding_attention, full_attention")
    sliding = kinds.count("sliding_attention")
    moe = _moe(path, config, "gpt_oss", router_bias=True, expert_bits=MXFP4_BITS if _quant_method(config) == "mxfp4" else 0.0)
    return dict(d_ffn=moe.d_expert, n_kv_heads=_int(path, config, "num_key_value_heads", 8),
                head_dim=_int(path, config, "head_dim", 64), tied_embeddings=_bool(path, config, "tie_word_embeddings", False),
                qkv_bias=_bool(path, config, "attention_bias", True), o_bias=_bool(path, config, "attention_bias", True),
                ffn_bias=True, attention_sinks=True, moe=moe, sliding_layers=sliding,
                sliding_window=_int(path, config, "sliding_window", 128) if sliding else 0)


OWN_FAMILY_READERS = {"deepseek_v3": _deepseek_v3_fields, "gpt_oss": _gpt_oss_fields}


def _family_fields(path, config: dict, family: str, hidden: int, heads: int) -> dict:
    """The family-specific part of a ModelSpec, read with the config's own key names."""
    if family == "opt":
        return _opt_fields(path, config, hidden, heads)
    if family in OWN_FAMILY_READERS:
        return OWN_FAMILY_READERS[family](path, config, hidden, heads)
    attention_bias = _bool(path, config, "attention_bias", False)
    # Mistral applies its window to every layer (absent key: 4096, null: none); Qwen only when
    # use_sliding_window is true.
    base = MOE_FAMILIES[family][0] if family in MOE_FAMILIES else family  # a MoE family's attention and norms
    if base == "mistral":
        default = 4096 if family == "mistral" else None  # MixtralConfig's sliding_window defaults to none
        window = _int(path, config, "sliding_window", default) if config.get("sliding_window", default) else 0
    elif base in ("qwen2", "qwen3") and _bool(path, config, "use_sliding_window", False):
        window = _int(path, config, "sliding_window")
    else:
        window = 0
    return dict(
        sliding_window=window,
        d_ffn=_int(path, config, "intermediate_size"),
        n_kv_heads=_int(path, config, "num_key_value_heads", KV_HEADS_DEFAULT[family] or heads),
        head_dim=_int(path, config, "head_dim", HEAD_DIM_DEFAULT[family] or hidden // heads),
        tied_embeddings=_bool(path, config, "tie_word_embeddings", False),
        qkv_bias=family == "qwen2" or attention_bias,
        o_bias=attention_bias and base in ("llama", "qwen3"),
        ffn_bias=family == "llama" and _bool(path, config, "mlp_bias", False),
        qk_norm=base == "qwen3")


# ModelSpec field -> the config key a user would look for in the message.
CONFIG_KEY = {"n_layers": "num_hidden_layers", "d_model": "hidden_size", "n_heads": "num_attention_heads",
              "n_kv_heads": "num_key_value_heads", "head_dim": "head_dim", "d_ffn": "intermediate_size",
              "vocab_size": "vocab_size", "max_positions": "max_position_embeddings",
              "d_embed": "word_embed_proj_dim", "weight_dtype": "torch_dtype", "family": "model_type"}


def model_spec_from_hf_config(path: Path | str, config: dict, name: str, display_name: str = "",
                              source: str = "") -> ModelSpec:
    """Map Hugging Face config.json fields onto a ModelSpec; problems name `path` and the key."""
    family = config.get("model_type", _MISSING)
    if not isinstance(family, str) or family not in FAMILIES:
        raise DataError(path, "config.model_type", family, f"allowed families: {', '.join(FAMILIES)}")
    for key in MOE_KEYS:
        experts = config.get(key)
        if family not in MOE_FAMILIES and isinstance(experts, (int, float)) and not isinstance(experts, bool) \
                and experts > 1:
            raise DataError(path, f"config.{key}", experts, f"experts in a {family} config: mixture-of-experts "
                            f"families are {', '.join(MOE_FAMILIES)} (set model_type)")
    hidden, heads = _int(path, config, "hidden_size"), _int(path, config, "num_attention_heads")
    if hidden % heads:
        raise DataError(path, "config.num_attention_heads", heads, f"must divide hidden_size ({hidden})")
    fields = _family_fields(path, config, family, hidden, heads)
    if heads % fields["n_kv_heads"]:
        raise DataError(path, "config.num_key_value_heads", fields["n_kv_heads"],
                        f"must divide num_attention_heads ({heads})")
    if family in MOE_FAMILIES and "moe" not in fields:
        fields["moe"] = _moe(path, config, family)
    dtype = _dtype(path, config)
    weight_dtype = "fp8" if _quant_method(config) == "fp8" else dtype
    if weight_dtype != dtype:  # the quantised checkpoint keeps its embedding and LM head in the config's dtype
        fields["head_dtype"] = dtype
    max_positions = _int(path, config, "max_position_embeddings")
    if family != "opt" and family not in OWN_FAMILY_READERS:  # so that `models import` refuses what the reference engine could not run
        rope_spec_from_hf_config(path, config, fields["head_dim"], max_positions)
    try:
        return ModelSpec(name=name, family=family, n_layers=_int(path, config, "num_hidden_layers"), d_model=hidden,
                         n_heads=heads, vocab_size=_int(path, config, "vocab_size"),
                         max_positions=max_positions, weight_dtype=weight_dtype,
                         kv_dtype=dtype, display_name=display_name or name, source=source, **fields)
    except SpecError as err:
        raise DataError(path, f"config.{CONFIG_KEY.get(err.field, err.field)}", err.value, err.allowed) from None


MODEL_FIELDS = ("name", "display_name", "source", "tag", "published_params", "notes", "config")


def parse_model(path: Path, data: dict) -> ModelEntry:
    """Build a ModelSpec from one models/NAME.toml document (Hugging Face fields under [config])."""
    source, tag = read_provenance(path, data, MODEL_FIELDS, "model")
    if data.get("name") != path.stem:
        raise DataError(path, "name", data.get("name", _MISSING), f"must equal the file name '{path.stem}'")
    published = data.get("published_params")
    if published is not None:
        published = parse_quantity(path, "published_params", published, units.COUNT)
    config = data.get("config", _MISSING)
    if not isinstance(config, dict):
        raise DataError(path, "config", config, "needs a [config] table with the Hugging Face config.json fields")
    display = read_string(path, data, "display_name", data["name"])
    spec = model_spec_from_hf_config(path, config, data["name"], display, source)
    return ModelEntry(spec, path, tag, published, config)


def strip_nulls(value: Any) -> Any:
    """TOML has no null: drop None values from nested dicts and lists (they mean 'default')."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value if v is not None]
    return value


def model_document(config: dict, name: str, source: str, tag: str, display_name: str | None = None) -> dict:
    """The TOML document `models import` writes for a config.json (checked by the caller)."""
    return {"name": name, "display_name": display_name or name, "source": source, "tag": tag,
            "config": strip_nulls(config)}
