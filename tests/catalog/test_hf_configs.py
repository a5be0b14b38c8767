"""Hugging Face config styles (transformers 4 and 5) and RoPE scalings as the catalog reads them,
and mixture-of-experts configs refused by `models import` (catalog/rope.py, catalog/models.py)."""

import json

import pytest
from click.testing import CliRunner

from dfvg_dse.catalog import CatalogError
from dfvg_dse.catalog.checkpoints import forward_settings
from dfvg_dse.catalog.models import model_spec_from_hf_config
from dfvg_dse.catalog.rope import rope_spec_from_hf_config
from dfvg_dse.cli import cli
from dfvg_dse.specs.rope import RopeSpec

BASE = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
        "max_position_embeddings": 4096, "torch_dtype": "float32"}
YARN = {"factor": 4.0, "original_max_position_embeddings": 1024, "beta_fast": 16, "mscale": 1.0,
        "mscale_all_dim": 1.0, "truncate": False}


def rope(config: dict) -> RopeSpec:
    return rope_spec_from_hf_config("config.json", config, 16, config.get("max_position_embeddings", 4096))


@pytest.mark.parametrize("v5, v4", [
    # what transformers 5 writes (rope_parameters) vs what transformers 4 wrote (rope_theta, rope_scaling)
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, {"rope_theta": 1e6, "rope_scaling": None}),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}},
     {"rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 2.0}}),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}},
     {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192, "rope_theta": 5e5}},
     {"rope_theta": 500000, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, **YARN}},
     {"rope_theta": 1e6, "rope_scaling": {"type": "yarn", **YARN}}),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1] * 8, "long_factor": [2.0] * 8,
                          "original_max_position_embeddings": 1024, "rope_theta": 1e4}},
     {"rope_scaling": {"type": "longrope", "short_factor": [1] * 8, "long_factor": [2.0] * 8,
                       "original_max_position_embeddings": 1024}}),
])
def test_both_config_styles_give_the_same_rope(v5, v4):
    assert rope({**BASE, **v5}) == rope({**BASE, **v4})
    assert rope({**BASE, **v5}).rope_type == v5["rope_parameters"]["rope_type"]


def test_what_each_field_defaults_to_and_which_key_wins():
    # no RoPE keys at all: transformers' default base; a base inside the section beats the top-level one
    assert rope(BASE) == RopeSpec(theta=10000.0)
    assert rope({**BASE, "rope_theta": 7.0, "rope_parameters": {"rope_type": "default", "rope_theta": 9.0}}).theta == 9
    assert rope({**BASE, "rope_theta": 7.0, "rope_parameters": {"rope_type": "default"}}).theta == 7
    # yarn and longrope: the original context defaults to max_position_embeddings and the factor to
    # their ratio; a top-level original_max_position_embeddings beats the section's (as transformers 5)
    yarn = rope({**BASE, "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 1024}})
    assert (yarn.factor, yarn.original_max_positions, yarn.beta_fast, yarn.beta_slow) == (4.0, 1024, 32.0, 1.0)
    assert rope({**BASE, "original_max_position_embeddings": 512, "rope_scaling": {
        "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 1024}}).original_max_positions == 512
    assert rope({**BASE, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0}}).original_max_positions == 4096
    # rope_type beats transformers 4's older "type"; identical sections in both styles are accepted
    both = {"type": "linear", "rope_type": "dynamic", "factor": 2.0}
    assert rope({**BASE, "rope_scaling": both}).rope_type == "dynamic"
    same = {"rope_type": "linear", "factor": 2.0}
    assert rope({**BASE, "rope_parameters": same, "rope_scaling": dict(same)}).factor == 2.0
    assert rope({**BASE, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}).max_positions == 4096


def test_forward_settings_of_a_checkpoint_config(tmp_path):
    config = {**BASE, "rms_norm_eps": 1e-5, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
    spec = model_spec_from_hf_config(tmp_path / "config.json", config, "t")
    assert forward_settings(tmp_path, config, spec) == (RopeSpec(theta=1e6), 1e-5)
    with pytest.raises(CatalogError, match=r"config.json: field 'config.rms_norm_eps' = 0: must be a number in"):
        forward_settings(tmp_path, {**config, "rms_norm_eps": 0}, spec)


@pytest.mark.parametrize("change, message", [
    ({"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4}},
     "field 'config.rope_parameters.rope_type' = 'proportional': allowed: default, linear, dynamic, llama3, yarn, "
     "longrope"),
    ({"rope_scaling": {"type": "ntk-by-parts", "factor": 2.0}},
     "field 'config.rope_scaling.rope_type' = 'ntk-by-parts': allowed: default, linear"),
    ({"rope_scaling": {"type": "linear"}},
     "field 'config.rope_scaling.factor' missing: required by rope_type 'linear'"),
    ({"rope_scaling": {"type": "dynamic", "factor": 0.5}},
     "field 'config.rope_scaling.factor' = 0.5: must be a number >= 1"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4.5, "high_freq_factor": 4.5}},
     "field 'config.rope_parameters.high_freq_factor' = 4.5: must be > low_freq_factor (4.5)"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8, "high_freq_factor": 4}},
     "field 'config.rope_parameters.low_freq_factor' missing: must be a number > 0"),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1.5] * 4, "long_factor": [1.0] * 8}},
     "field 'config.rope_parameters.short_factor' = [1.5, 1.5, 1.5, 1.5]: must be a list of head_dim / 2 = 8 numbers"),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 7 + [0]}},
     "field 'config.rope_parameters.long_factor[7]' = 0: must be a number > 0"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "truncate": "yes"}},
     "field 'config.rope_parameters.truncate' = 'yes': must be true or false"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 0}},
     "field 'config.rope_parameters.original_max_position_embeddings' = 0: must be a positive integer"),
    ({"rope_theta": -1}, "field 'config.rope_theta' = -1: must be a number > 0"),
    ({"partial_rotary_factor": 0.5}, "field 'config.partial_rotary_factor' = 0.5: must be 1"),
    ({"rope_parameters": "yarn"}, "field 'config.rope_parameters' = 'yarn': must be a table of RoPE parameters"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2}, "rope_scaling": {"rope_type": "linear", "factor": 4}},
     "field 'config.rope_scaling' = {'rope_type': 'linear', 'factor': 4}: disagrees with config.rope_parameters"),
    ({"rope_parameters": {"full_attention": {"rope_type": "default"}}},
     "field 'config.rope_parameters.full_attention' = {'rope_type': 'default'}: per-layer-type RoPE parameters"),
    ({"num_experts": 128, "num_experts_per_tok": 8},
     "field 'config.num_experts' = 128: experts in a "),
    ({"model_type": "mixtral", "num_local_experts": 8},
     "field 'config.num_experts_per_tok' missing: required by this model family"),
    # a count past int32 is a typo; one past float range ended in an OverflowError or inf (data fuzzer)
    ({"hidden_size": 2**31}, "field 'config.hidden_size' = 2147483648: must be at most 2,147,483,647 (2^31 - 1)"),
    ({"intermediate_size": 10**300},
     f"field 'config.intermediate_size' = {'1' + '0' * 56}...: must be at most 2,147,483,647 (2^31 - 1)"),
])
def test_models_import_refuses_with_one_line(tmp_path, change, message):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**BASE, **change}))
    with pytest.raises(CatalogError) as err:  # the whole message: file, field, value, what is allowed
        model_spec_from_hf_config(config, {**BASE, **change}, "m")
    assert str(err.value).startswith(f"{config}: {message}") and "\n" not in str(err.value)
    result = CliRunner().invoke(cli, ["models", "import", str(config), "--name", "m", "--out-dir", str(tmp_path)])
    assert_one_line(result, message)
    assert not (tmp_path / "m.toml").exists()


def assert_one_line(result, message: str) -> None:
    """Exit code 2 and one line naming the field and what is allowed (the CLI may shorten long values)."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    field, allowed = message.split("'")[1], message.rsplit(": ", 1)[-1]
    assert len(lines) == 1 and f"'{field}'" in lines[0] and allowed in lines[0], lines


@pytest.mark.parametrize("change", [
    {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, **YARN}},  # transformers 5
    {"rope_theta": 1e6, "rope_scaling": {"type": "yarn", **YARN}},  # transformers 4
    {"rope_parameters": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}},
    {"num_experts": 1},  # one expert is a dense model
])
def test_models_import_reads_both_styles_and_writes_a_file_that_reads_back(tmp_path, change):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**BASE, **change}))
    runner = CliRunner()
    result = runner.invoke(cli, ["models", "import", str(config), "--name", "m", "--out-dir", str(tmp_path / "out"),
                                 "--json"])
    assert result.exit_code == 0, result.stderr
    shown = runner.invoke(cli, ["--models-dir", str(tmp_path / "out"), "models", "show", "m", "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["spec"]["family"] == "qwen3"
