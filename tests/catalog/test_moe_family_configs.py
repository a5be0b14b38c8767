"""The 2026 MoE families from their Hugging Face config.json (issue 17): DeepSeek-V3 and gpt-oss
through `models import` as a user would, and layouts not modelled refused in one line."""

from __future__ import annotations

import json

import pytest

from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.errors import DataError
from dfvg_dse.catalog.models import model_spec_from_hf_config
from dfvg_dse.costs import param_counts

CATALOG = Catalog.open("models", "hwdb")


@pytest.mark.parametrize("name", ["deepseek-v3", "gpt-oss-20b", "gpt-oss-120b"])
def test_models_import_reads_the_config_json_as_shipped(run, tmp_path, name):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CATALOG.model_entry(name).config))
    result = run("models", "import", str(config), "--name", "imported", "--out-dir", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    imported = Catalog.open(str(tmp_path), "hwdb").model("imported")
    assert param_counts(imported) == param_counts(CATALOG.model(name))
    assert (imported.moe, imported.mla, imported.sliding_layers) == (CATALOG.model(name).moe, CATALOG.model(name).mla,
                                                                     CATALOG.model(name).sliding_layers)


def _deepseek(**change) -> dict:
    return {**CATALOG.model_entry("deepseek-v3").config, **change}


@pytest.mark.parametrize("config,field", [
    (_deepseek(moe_layer_freq=2), "config.moe_layer_freq"),
    (_deepseek(attention_bias=True), "config.attention_bias"),
    (_deepseek(first_k_dense_replace=99), "config.first_k_dense_replace"),
    (_deepseek(kv_lora_rank=None), "config.kv_lora_rank"),
    (_deepseek(n_shared_experts=-1), "config.n_shared_experts"),
    ({**CATALOG.model_entry("gpt-oss-20b").config, "layer_types": ["full_attention"] * 3}, "config.layer_types"),
    ({**CATALOG.model_entry("gpt-oss-20b").config, "num_experts_per_tok": 64}, "config.num_experts_per_tok")])
def test_layouts_not_modelled_are_one_line(config, field):
    with pytest.raises(DataError) as err:
        model_spec_from_hf_config("config.json", config, "m")
    assert field in str(err.value) and "\n" not in str(err.value)


def test_deepseek_v2_lite_style_full_query_projection_counts_as_transformers_does():
    """q_lora_rank null (DeepSeek-V2-Lite): a plain q projection of d x heads x 192."""
    spec = model_spec_from_hf_config("config.json", _deepseek(q_lora_rank=None), "m")
    full = param_counts(CATALOG.model("deepseek-v3"))
    lite = param_counts(spec)
    per_layer = 7168 * 1536 + 1536 + 1536 * 128 * 192 - 7168 * 128 * 192  # bottleneck and its norm vs one matrix
    assert full.total - lite.total == 61 * per_layer
