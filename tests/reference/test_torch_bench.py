"""The torch microbenchmark of a model's layer shapes (issue 14, deliver 6), on the CPU: its layers
against a numpy recomputation, its parameter count against the cost model's, its timings and
its refusals. Skipped without torch."""

import dataclasses
import math
import sys

import numpy as np
import pytest

from dfvg_dse.catalog import Catalog
from dfvg_dse.costs.work import param_counts
from dfvg_dse.specs import InputError, ModelSpec

torch = pytest.importorskip("torch")
from dfvg_dse.reference import torch_bench as tb  # noqa: E402

pytestmark = pytest.mark.torch

GQA = ModelSpec(name="tiny-gqa", family="qwen3", n_layers=4, d_model=64, n_heads=4, n_kv_heads=2, head_dim=24,
                d_ffn=96, vocab_size=101, max_positions=512, qkv_bias=True, qk_norm=True)
OPT = ModelSpec(name="tiny-opt", family="opt", n_layers=4, d_model=48, n_heads=4, n_kv_heads=4, head_dim=12,
                d_ffn=80, vocab_size=97, max_positions=512, gated_ffn=False, qkv_bias=True, o_bias=True,
                ffn_bias=True, norm="layer", d_embed=32, tied_embeddings=True, learned_positions=514)  # no rotary
WINDOW = dataclasses.replace(GQA, name="tiny-window", sliding_window=5, qkv_bias=False, qk_norm=False)
MODELS = [GQA, OPT, WINDOW, dataclasses.replace(OPT, name="tiny-bare", norm_affine=False, final_norm=False)]


@pytest.fixture(autouse=True, scope="module")
def _two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(min(threads, 2))
    yield
    torch.set_num_threads(threads)


def _np(tensor):
    return tensor.detach().double().cpu().numpy()


def _norm(x, w, model, bias=None):
    """The model's norm written out: RMSNorm x / rms * g, or LayerNorm (x - mean) / std * g + b."""
    if model.norm == "layer":
        y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    else:
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    return y * (1.0 if w is None else _np(w)) + (0.0 if bias is None else _np(bias))


def _linear(x, weights, name, bias=None):
    out = x @ _np(weights[name]).T
    return out if bias not in weights else out + _np(weights[bias])


def _rotated(x, start):
    """x (b, n, heads, dh) with each pair (i, i + dh/2) turned by the angle position x base^(-2i/dh)."""
    dh = x.shape[-1]
    angle = np.arange(start, start + x.shape[1])[:, None] * tb.ROPE_BASE ** (-2.0 * np.arange(dh // 2) / dh)
    cos, sin = np.cos(angle)[None, :, None, :], np.sin(angle)[None, :, None, :]
    first, second = x[..., : dh // 2], x[..., dh // 2:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def _reference_layer(model, w, x, cached_k, cached_v):
    """One layer, head by head, with an explicit causal softmax over the cache and the new tokens."""
    b, n, _ = x.shape
    h = _norm(x, w.get("attn_norm"), model, w.get("attn_norm_bias"))
    q = _linear(h, w, "wq", "bq").reshape(b, n, model.n_heads, model.head_dim)
    k = _linear(h, w, "wk", "bk").reshape(b, n, model.n_kv_heads, model.head_dim)
    v = _linear(h, w, "wv", "bv").reshape(b, n, model.n_kv_heads, model.head_dim)
    if model.qk_norm:
        q, k = _norm(q, w["q_norm"], model), _norm(k, w["k_norm"], model)
    c = cached_k.shape[2]
    if not model.learned_positions:  # rotary: the new tokens sit at positions c .. c + n - 1
        q, k = _rotated(q, c), _rotated(k, c)
    out = np.zeros((b, n, model.n_heads, model.head_dim))
    group = model.n_heads // model.n_kv_heads
    for seq in range(b):
        for head in range(model.n_heads):
            kv = head // group  # query heads share kv heads in consecutive groups
            keys = np.concatenate([cached_k[seq, kv], k[seq, :, kv]])  # (c + n, dh)
            values = np.concatenate([cached_v[seq, kv], v[seq, :, kv]])
            for i in range(n):
                scores = keys[: c + i + 1] @ q[seq, i, head] / math.sqrt(model.head_dim)
                p = np.exp(scores - scores.max())
                out[seq, i, head] = (p / p.sum()) @ values[: c + i + 1]
    x = x + _linear(out.reshape(b, n, -1), w, "wo", "bo")
    h = _norm(x, w.get("ffn_norm"), model, w.get("ffn_norm_bias"))
    if model.gated_ffn:
        gate = _linear(h, w, "w_gate")
        f = gate / (1 + np.exp(-gate)) * _linear(h, w, "w_up", "b_up")
    else:
        f = np.maximum(_linear(h, w, "w_up", "b_up"), 0.0)
    return x + _linear(f, w, "w_down", "b_down")


def _reference_head(model, head, x):
    if model.final_norm:
        x = _norm(x, head.get("final_norm"), model, head.get("final_norm_bias"))
    if "project_out" in head:
        x = x @ _np(head["project_out"]).T
    return x @ _np(head["lm_head"]).T


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize("n, context", [(1, 7), (4, 0), (5, 9)])
def test_the_layers_equal_a_numpy_recomputation(model, n, context):
    stack = tb.build_layer_stack(model, 2, "cpu", "float32", seed=3)
    batch = 2
    caches = tb.make_caches(stack, n, context, batch)
    cached = [(_np(k[:, :, :-n]), _np(v[:, :, :-n])) for k, v in caches]  # before the forward writes its own
    x = torch.randn((batch, n, model.d_model), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        logits = tb.forward(stack, x, caches, tb.attention_mask(torch, stack, n, context))
    assert logits.shape == (batch, n, model.vocab_size)
    assert cached[0][0].shape[2] == (min(context, 5) if model.sliding_window else context)
    expected = _np(x)
    for weights, (k, v) in zip(stack.layers, cached):
        expected = _reference_layer(model, weights, expected, k, v)
    expected = _reference_head(model, stack.head, expected)
    assert np.abs(_np(logits) - expected).max() < 1e-5
    assert np.abs(expected).max() > 1e-2  # not trivially near zero


@pytest.mark.parametrize("model", MODELS + [Catalog.open().model("llama-68m")], ids=lambda m: m.name)
def test_a_layer_has_the_cost_models_parameters(model):
    stack = tb.build_layer_stack(model, 1, "cpu", "float32", seed=0)
    counts = param_counts(model)
    assert sum(t.numel() for t in stack.layers[0].values()) == counts.per_layer
    assert stack.head["lm_head"].shape == (model.vocab_size, model.d_embed)
    assert stack.head["lm_head"].numel() == counts.head


def test_weights_follow_the_seed():
    one, again, other = (tb.build_layer_stack(GQA, 1, "cpu", "float32", seed=s) for s in (7, 7, 8))
    assert all(torch.equal(one.layers[0][k], again.layers[0][k]) for k in one.layers[0])
    assert not torch.equal(one.layers[0]["wq"], other.layers[0]["wq"])
    assert abs(float(one.layers[0]["wq"].std()) - tb.WEIGHT_STD) < 0.002
    assert tb.build_layer_stack(GQA, 1, "cpu", "bfloat16", seed=0).layers[0]["wq"].dtype == torch.bfloat16


def test_more_tokens_take_longer():
    # compute-heavy at n = 256 (2.6 GFLOP: ~0.1 s on two cores), 20 MB of weights read at n = 1
    model = ModelSpec(name="mid", family="llama", n_layers=8, d_model=512, n_heads=8, n_kv_heads=8, head_dim=64,
                      d_ffn=1536, vocab_size=8000, max_positions=2048)
    stack = tb.build_layer_stack(model, 1, "cpu", "float32", seed=0)
    decode = tb.time_forward(stack, 1, 16, 1, repeats=3, warmup=1)
    verify = tb.time_forward(stack, 256, 16, 1, repeats=3, warmup=1)
    assert 0 < decode < verify and math.isfinite(verify)
    assert verify > 3 * decode  # 256x the FLOPs; the weights are read once either way


def test_a_deep_forward_cycles_through_the_layers():
    # depth 5 over 2 layers runs layers 0, 1, 0, 1, 0; each writes its own new K and V over the cycled cache's
    # last n positions before reading, so the result is the numpy chain with the original caches
    stack = tb.build_layer_stack(GQA, 2, "cpu", "float32", seed=3)
    n, context, batch = 3, 6, 2
    caches = tb.make_caches(stack, n, context, batch)
    cached = [(_np(k[:, :, :-n]), _np(v[:, :, :-n])) for k, v in caches]
    x = torch.randn((batch, n, GQA.d_model), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        logits = tb.forward(stack, x, caches, tb.attention_mask(torch, stack, n, context), depth=5)
        head_only = tb.forward(stack, x, caches, None, depth=0)
    expected = _np(x)
    for i in range(5):
        expected = _reference_layer(GQA, stack.layers[i % 2], expected, *cached[i % 2])
    assert np.abs(_np(logits) - _reference_head(GQA, stack.head, expected)).max() < 1e-5
    assert np.abs(_np(head_only) - _reference_head(GQA, stack.head, _np(x))).max() < 1e-5


@pytest.mark.parametrize("name, device, expected", [
    # bytes of one layer from the cost model's parameter count (costs/work.param_counts), 2 bytes each:
    # llama-3.1-8b 218 M parameters (436 MB: 1 GiB needs 3, fewer than 8; 4 GiB needs 9.85, so 10), qwen2.5-0.5b
    # 14.9 M (29.8 MB: 1 GiB needs 37, more than its 24 layers), llama-68m's 2 layers
    ("llama-3.1-8b", "cuda", 8), ("llama-3.1-8b", "cpu", 10), ("qwen2.5-0.5b", "cuda", 24), ("llama-68m", "cuda", 2),
])
def test_distinct_layers_outgrow_the_cache(name, device, expected):
    model = Catalog.open().model(name)
    per_layer_bytes = 2 * param_counts(model).per_layer
    assert tb.layer_weight_bytes(model, "bfloat16") == per_layer_bytes
    assert tb.distinct_layers(model, 8, device, "bfloat16") == expected
    assert expected == min(model.n_layers, max(8, math.ceil(tb.WORKING_SET_BYTES[device] / per_layer_bytes)))


def test_benchmark_times_the_whole_depth(monkeypatch):
    # a working set of one layer's weights: the 8-layer model cycles through 2 distinct layers, and each timed
    # call runs all 8 of them
    deep = dataclasses.replace(OPT, name="tiny-deep", n_layers=8)
    monkeypatch.setitem(tb.WORKING_SET_BYTES, "cpu", tb.layer_weight_bytes(deep, "float32"))
    depths, real_forward = [], tb.forward

    def counting_forward(stack, x, caches, mask, head=True, depth=None):
        depths.append((len(stack.layers), len(caches), depth))
        return real_forward(stack, x, caches, mask, head, depth)

    monkeypatch.setattr(tb, "forward", counting_forward)
    records = tb.benchmark(deep, "cpu", "float32", tokens=[1, 3], contexts=[0, 8], batches=[2], layers=2, repeats=2,
                           warmup=1)
    assert [(r["tokens"], r["context"], r["batch"]) for r in records] == [(1, 0, 2), (1, 8, 2), (3, 0, 2), (3, 8, 2)]
    assert depths == [(2, 2, 8)] * (4 * 3)  # 4 settings x (1 warm-up + 2 repeats), each through the 8 layers
    for r in records:
        assert set(r) == {"tokens", "context", "batch", "layers", "depth", "seconds"}
        assert r["depth"] == 8 and r["layers"] == 2
        assert 0 < r["seconds"] < 1


def test_the_head_alone_is_a_forward_of_depth_zero():
    model = ModelSpec(name="mid", family="llama", n_layers=8, d_model=512, n_heads=8, n_kv_heads=8, head_dim=64,
                      d_ffn=1536, vocab_size=8000, max_positions=2048)
    stack = tb.build_layer_stack(model, 2, "cpu", "float32", seed=0)
    head = tb.time_forward(stack, 64, 16, 1, repeats=3, warmup=1, depth=0)
    whole = tb.time_forward(stack, 64, 16, 1, repeats=3, warmup=1, depth=8)
    assert 0 < head < whole  # 8 layers of 3.1 M weights each against one 4.1 M head


def test_device_microbenchmarks():
    flops = tb.peak_matmul_flops_per_s("cpu", "float32", size=128, repeats=3)
    bandwidth = tb.copy_bandwidth_bytes_per_s("cpu", bytes=1 << 20, repeats=3)
    assert math.isfinite(flops) and 1e6 < flops < 1e14
    assert math.isfinite(bandwidth) and 1e6 < bandwidth < 1e13


@pytest.mark.parametrize("call, message", [
    (lambda: tb.build_layer_stack(GQA, 0, "cpu", "float32", 0), "layers = 0: must be an integer >= 1"),
    (lambda: tb.build_layer_stack(GQA, True, "cpu", "float32", 0), "layers = True"),
    (lambda: tb.build_layer_stack(GQA, 1, "cpu", "float64", 0), "torch dtype 'float64': must be one of"),
    (lambda: tb.build_layer_stack(GQA, 1, "gpu", "float32", 0), "torch device 'gpu': must be cpu, cuda or cuda:N"),
    (lambda: tb.build_layer_stack(GQA, 1, "cpu", "float32", -1), "seed = -1: must be an integer >= 0"),
    (lambda: tb.build_layer_stack("llama", 1, "cpu", "float32", 0), "model: expected a ModelSpec, got str"),
    (lambda: tb.benchmark(GQA, "cpu", "float32", [], [0], [1]), "tokens: the list is empty"),
    (lambda: tb.benchmark(GQA, "cpu", "float32", [1, 0], [0], [1]), "tokens = [1, 0]: every entry"),
    (lambda: tb.benchmark(GQA, "cpu", "float32", [1], [-1], [1]), "contexts = [-1]: every entry"),
    (lambda: tb.benchmark(GQA, "cpu", "float32", [1], [0], "4"), "batches = '4': must be a list"),
    (lambda: tb.benchmark(GQA, "cpu", "float32", [1], [0], [1], repeats=0), "repeats = 0"),
    (lambda: tb.time_forward(tb.build_layer_stack(GQA, 1, "cpu", "float32", 0), 1, 0, 0, 1, 0), "batch = 0"),
    (lambda: tb.time_forward(tb.build_layer_stack(GQA, 1, "cpu", "float32", 0), 1, 2.5, 1, 1, 0), "context = 2.5"),
    (lambda: tb.time_forward(tb.build_layer_stack(GQA, 1, "cpu", "float32", 0), 1, 0, 1, 1, 0, depth=-1),
     "depth = -1: must be an integer >= 0"),
    (lambda: tb.peak_matmul_flops_per_s("cpu", "int8"), "torch dtype 'int8'"),
    (lambda: tb.copy_bandwidth_bytes_per_s("cpu", bytes=2), "bytes = 2: must be an integer >= 4"),
])
def test_bad_inputs_are_refused_in_one_line(call, message):
    with pytest.raises(InputError) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_unavailable_cuda_device_is_refused():
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(InputError, match=r"torch device 'cuda:\d+': (CUDA is not available|this machine has)"):
        tb.build_layer_stack(GQA, 1, f"cuda:{count}", "float32", 0)


def test_without_torch_a_one_line_refusal(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(InputError, match="torch is not installed"):
        tb.build_layer_stack(GQA, 1, "cpu", "float32", 0)
