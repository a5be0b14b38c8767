import dataclasses

import pytest

from dfvg_dse.specs import LinkSpec, MemoryTier, ModelSpec, SpecError, SystemSpec

TINY = dict(name="tiny", family="llama", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ffn=128,
            vocab_size=100, max_positions=256)


def test_model_spec_derives_embedding_width_and_kv_bytes():
    spec = ModelSpec(**TINY)
    assert spec.d_embed == 64
    # K and V, 2 layers, 2 kv heads of 16, fp16
    assert spec.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2


@pytest.mark.parametrize("field, value, message", [
    ("n_heads", 5, "must divide d_model"),
    ("n_kv_heads", 3, "must divide n_heads"),
    ("d_model", 0, "must be a positive integer"),
    ("n_layers", -1, "must be a positive integer"),
    ("family", "gpt2", "allowed: llama, mistral, qwen2, qwen3, opt"),
    ("weight_dtype", "fp64", "allowed: float32"),
])
def test_model_spec_rejects_bad_values(field, value, message):
    with pytest.raises(SpecError, match=message) as err:
        ModelSpec(**{**TINY, field: value})
    assert err.value.field == field


def test_model_spec_is_frozen_and_with_dtypes_copies():
    spec = ModelSpec(**TINY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.n_layers = 3
    int8 = spec.with_dtypes("int8", "fp8")
    assert int8.weight_bytes_per_param == 1 and int8.kv_bytes_per_value == 1 and spec.weight_bytes_per_param == 2


def test_memory_tier_rejects_efficiency_above_one():
    with pytest.raises(SpecError, match="fraction in"):
        MemoryTier("hbm", 1e9, 1e12, 1.2)


def test_system_needs_a_link_between_two_devices(catalog):
    gpu, fpga = catalog.device("rtx-4090"), catalog.device("v80")
    link = catalog.link("pcie-gen4-x16-host-staged")
    assert SystemSpec(fpga, gpu, link).link is link
    with pytest.raises(SpecError, match="a link is required"):
        SystemSpec(fpga, gpu)
    with pytest.raises(SpecError, match="must be omitted"):
        SystemSpec(gpu, gpu, link)


def test_link_rejects_zero_hops():
    with pytest.raises(SpecError, match="hops"):
        LinkSpec("l", "pcie", "peer-to-peer", 1e9, 0.8, 1e-6, 0, 0.0, 1e-12)
