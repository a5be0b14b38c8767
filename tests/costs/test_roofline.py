"""Roofline regimes: flat then linear in n, the knee where the formula says, bounds named."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dfvg_dse.costs import BOUNDS, device_forward_cost, knee_tokens, roofline_time

finite = st.floats(min_value=0, max_value=1e3, allow_nan=False)


@given(finite, finite, finite)
def test_time_is_max_of_compute_and_memory_plus_overhead(compute, memory, overhead):
    r = roofline_time(compute, memory, overhead)
    assert r.time_s >= compute and r.time_s >= memory and r.time_s >= overhead
    assert r.time_s == pytest.approx(max(compute, memory) + overhead)
    name = BOUNDS[int(r.bound)]
    if overhead > max(compute, memory):
        assert name == "overhead"
    else:
        assert name == ("compute" if compute >= memory else "memory")


@pytest.mark.parametrize("device", ["a100-80gb", "rtx-4090", "h100-sxm", "l4"])
def test_verify_cost_is_flat_then_linear_with_the_knee_at_the_formula(catalog, device):
    model, gpu = catalog.model("llama-2-7b"), catalog.device(device)
    peak = gpu.peak_for(model.compute_dtype) * gpu.eta_compute
    knee = knee_tokens(peak, gpu.main_memory.achieved_bandwidth_bytes_per_s, model.weight_bytes_per_param)
    n = np.arange(1, 16 * int(knee))
    cost = device_forward_cost(model, gpu, n, 0, 1)
    # flat: well below the knee the time moves by under 2%
    small = n <= knee / 16
    assert cost.time_s[small].max() / cost.time_s[0] < 1.02
    assert set(cost.bound_name[n < 0.9 * knee]) == {"memory"}
    assert set(cost.bound_name[n > 1.1 * knee]) == {"compute"}
    # linear: far above the knee, doubling n doubles the time (within 5%)
    big = int(4 * knee)
    assert cost.time_s[2 * big - 1] / cost.time_s[big - 1] == pytest.approx(2.0, rel=0.05)
    # the switch from memory to compute happens within 3% of n* (KV and attention move it slightly)
    switch = n[np.argmax(cost.bound_name == "compute")]
    assert switch == pytest.approx(knee, rel=0.03)


def test_overhead_bound_for_a_tiny_model(catalog):
    from dfvg_dse.specs import ModelSpec
    tiny = ModelSpec(name="t", family="llama", n_layers=4, d_model=64, n_heads=4, n_kv_heads=4, head_dim=16,
                     d_ffn=128, vocab_size=256, max_positions=512)
    gpu = catalog.device("h100-sxm")
    cost = device_forward_cost(tiny, gpu, 1, 0, 1)
    # ~0.3 MB of weights take ~0.1 us; launches take forward + 4 layers of fixed time
    assert str(cost.bound_name) == "overhead"
    assert cost.time_s == pytest.approx(cost.memory_time_s + gpu.forward_overhead_s + 4 * gpu.layer_overhead_s)
