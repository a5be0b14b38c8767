"""The engine's batching defaults serve-sim and search --rate assume on each verifier, against vLLM's
own code: vLLM 0.33.0's EngineArgs.get_batch_defaults for its online server (marker `engines`: it
needs the vllm wheel), and against the values that code holds (always)."""

import pytest

from dfvg_dse.specs.serving import engine_batching

# vllm/engine/arg_utils.py (vLLM 0.33.0), get_batch_defaults, OPENAI_API_SERVER: (max_num_seqs, budget)
EXPECTED = {"rtx-4090": (256, 2048), "l40s": (256, 2048), "a100-80gb": (256, 2048), "h100-sxm": (1024, 8192),
            "h200": (1024, 8192), "b200": (1024, 16384), "xeon-silver-4310": (128, 2048)}


@pytest.mark.parametrize("device", sorted(EXPECTED))
def test_batching_defaults_by_device(catalog, device):
    spec = engine_batching(catalog.device(device))
    assert (spec.max_batch, spec.chunk_tokens) == EXPECTED[device]
    given = engine_batching(catalog.device(device), max_batch=7, chunk_tokens=0)
    assert (given.max_batch, given.chunk_tokens) == (7, 0)


@pytest.mark.engines
@pytest.mark.parametrize("device", ["rtx-4090", "a100-80gb", "h100-sxm", "h200", "b200"])
def test_vllm_picks_the_same_defaults(catalog, device, monkeypatch):
    """vLLM's own rule, told the device's memory and name as its platform would report them."""
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    pytest.importorskip("torch")
    pytest.importorskip("vllm")
    from vllm.engine import arg_utils
    from vllm.usage.usage_lib import UsageContext

    spec = catalog.device(device)
    platform = arg_utils.current_platform
    monkeypatch.setattr(platform, "get_device_total_memory", lambda *a, **k: int(spec.memory_capacity_bytes),
                        raising=False)
    monkeypatch.setattr(platform, "get_device_name", lambda *a, **k: f"NVIDIA {spec.name.upper()}", raising=False)
    monkeypatch.setattr(platform, "is_device_capability", lambda *a, **k: False, raising=False)
    monkeypatch.setattr(platform, "is_cpu", lambda *a, **k: False, raising=False)
    monkeypatch.setattr(platform, "is_tpu", lambda *a, **k: False, raising=False)
    tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(world_size=1)
    ours = engine_batching(spec)
    assert (seqs[UsageContext.OPENAI_API_SERVER], tokens[UsageContext.OPENAI_API_SERVER]) == \
        (ours.max_batch, ours.chunk_tokens)
