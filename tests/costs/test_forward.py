"""Device dispatch, memory fit, and predictions against measured batch-1 decode speeds."""

import numpy as np
import pytest

from dfvg_dse.costs import device_forward_cost, memory_fit, param_counts

# Measured batch-1 decode of LLaMA-2-7B in 16-bit (hardware.md §4b):
# pytorch-labs/gpt-fast README: A100-80GB (power-limited to 330 W), 104.9 tok/s;
# pytorch-labs/gpt-fast issue #27: RTX 4090, ~65 tok/s; InternLM/lmdeploy issue #210: A10, 27 ms/token.
GPT_FAST_TOK_S = {"a100-80gb": 104.9, "rtx-4090": 65.0, "a10": 1 / 0.027}
TOL = 0.15  # issue 2: the calibration defaults should land within 15%


@pytest.mark.parametrize("device, measured", GPT_FAST_TOK_S.items())
def test_batch1_decode_matches_measurements(catalog, device, measured):
    model = catalog.model("llama-2-7b")
    # gpt-fast generates 200 tokens after a short prompt: about 100 tokens of context on average
    predicted = 1 / float(device_forward_cost(model, catalog.device(device), 1, 100, 1).time_s)
    assert abs(predicted / measured - 1) < TOL


def test_cpu_and_gpu_share_the_processor_model(catalog):
    model = catalog.model("qwen3-0.6b")
    cpu = device_forward_cost(model, catalog.device("xeon-8480plus"), 1, 0, 1)
    # hardware.md §6: a 1B FP16 draft (2 GB) on SPR at eta 0.6 runs ~92 tok/s; ours is 0.6B -> faster
    weights = param_counts(model).read_per_forward * 2
    assert float(cpu.memory_time_s) == pytest.approx(weights / (0.6 * 307.2e9), rel=0.02)


def test_memory_fit(catalog):
    big, small = catalog.model("llama-2-70b"), catalog.model("llama-2-7b")
    a100 = catalog.device("a100-80gb")
    assert not memory_fit(big, a100, 1).fits
    assert memory_fit(small, a100, 4096).fits
    fit = memory_fit(small, a100, 4096, np.array([1, 64]))
    # 64 sequences of 4096 tokens x 0.5 MB/token = 137 GB of KV cache: no longer fits
    assert list(fit.fits) == [True, False]
    assert fit.kv_cache_bytes[1] == 64 * 4096 * small.kv_bytes_per_token
    assert memory_fit(big, catalog.device("h200"), 1).fits


def test_fp8_runs_at_fp8_peak_where_the_device_has_one(catalog):
    model = catalog.model("llama-2-7b").with_dtypes("fp8", "fp8")
    a100 = catalog.device("a100-80gb")
    assert model.compute_dtype == "fp8" and a100.peak_for("fp8") == a100.peak_for("fp16")  # no fp8 on Ampere
    assert model.weight_bytes_per_param == 1


def test_fp32_never_falls_back_to_a_half_precision_peak(catalog):
    from dfvg_dse.specs import SpecError
    gpu = catalog.device("a100-80gb")
    assert gpu.peak_for("fp32") == pytest.approx(19.5e12)  # CUDA cores, not the 312 TFLOPS tensor rate
    cpu = catalog.device("xeon-silver-4310")
    assert cpu.peak_for("bf16") == cpu.peak_for("fp32")  # half precision computed in fp32: slower, allowed
    import dataclasses
    no_fp32 = dataclasses.replace(gpu, peak_flops_per_s=(("fp16", 1e14),))
    with pytest.raises(SpecError, match="states no fp32 peak"):
        no_fp32.peak_for("fp32")
