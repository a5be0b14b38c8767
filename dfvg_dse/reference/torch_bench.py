"""Microbenchmarks of a model's real layer shapes on the user's torch device (issue 14, deliver 6).

`benchmark` times whole-model forwards of n new tokens for b sequences over a KV cache of c tokens:
all of the model's decoder layers, built with its exact shapes and random weights (a few distinct
layers' weights and caches, cycled), and its LM head, as one call; `dfvg-dse calibrate` fits engine
parameters to these records (the fitting is not here).

The layers are a small pure-tensor implementation, cost-equivalent to a serving engine's eager
path rather than numerically equal to the checkpoint:
- pre-norm always (OPT-350M's post-norm runs the same operators in another order);
- a rotary model's q and k are rotated as Hugging Face does it (`rotate_half`; the cos and sin of
  the new tokens' positions made once per forward): elementwise work under 1% of a layer's device
  time, but a handful of kernel launches a layer, which an eager host pays (the base, ROPE_BASE,
  changes no cost); OPT's learned positions, one add before the first layer, are left out;
- q, k, v, o, gate/up/down (or fc1/fc2) are separate GEMMs as in Hugging Face (engines that fuse
  qkv or gate/up launch fewer, larger GEMMs of the same FLOPs and bytes);
- attention is torch's `scaled_dot_product_attention`, as Hugging Face's SDPA path calls it: GQA
  through `enable_gqa` where no mask is needed (K and V not copied per head), K and V repeated per
  query head where a mask is (a verify over a cache: the kernels that take a mask do not all take
  GQA); the new tokens attend to the whole cache and causally to each other;
  a sliding window caps the cache at `sliding_window` tokens, as `ModelSpec.attended_context` does;
- SiLU-gated FFN, or ReLU for a plain one (OPT).

torch is imported inside the functions only, so the package imports without it.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass, field

from dfvg_dse.specs import InputError, ModelSpec
from dfvg_dse.specs.hardware import show_value
from dfvg_dse.units import DTYPE_BYTES

DTYPES = ("float32", "float16", "bfloat16")
WEIGHT_STD = 0.02
ROPE_BASE = 10000.0  # rotary base: any value costs the same
DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?")
DEFAULT_MATMUL_SIZE = {"cpu": 1024, "cuda": 8192}
DEFAULT_COPY_BYTES = {"cpu": 1 << 27, "cuda": 1 << 30}
# The weights a full-depth forward cycles through (distinct_layers): several times the largest last-level
# cache a layer's weights could otherwise stay in between visits (a GPU's L2: 50 MB on an H100, 126 MB on a
# B200; a CPU's L3: 384 MB on an EPYC 9654, 1,152 MB on a Genoa-X), so every layer reads its weights from
# main memory as in the real model
WORKING_SET_BYTES = {"cpu": 1 << 32, "cuda": 1 << 30}


def torch_module():
    try:
        import torch
    except ImportError:
        raise InputError("torch is not installed: pip install torch "
                         "(https://pytorch.org/get-started/locally/)") from None
    return torch


def _positive(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} = {show_value(value)}: must be an integer >= {minimum}")
    return value


def _int_list(name: str, values, minimum: int) -> list[int]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise InputError(f"{name} = {show_value(values)}: must be a list of integers >= {minimum}")
    values = list(values)
    if not values:
        raise InputError(f"{name}: the list is empty: give at least one integer >= {minimum}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InputError(f"{name} = {show_value(values)}: every entry must be an integer >= {minimum}, "
                             f"not {show_value(value)}")
    return values


def _check_dtype(dtype) -> str:
    if dtype not in DTYPES:
        raise InputError(f"torch dtype {show_value(dtype)}: must be one of {', '.join(DTYPES)}")
    return dtype


def check_torch_device(device):
    """The torch.device for a device string (cpu, cuda or cuda:N) that this torch can use."""
    if not isinstance(device, str) or not DEVICE_PATTERN.fullmatch(device):
        raise InputError(f"torch device {show_value(device)}: must be cpu, cuda or cuda:N")
    torch = torch_module()
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(f"torch device {show_value(device)}: CUDA is not available to this torch "
                             f"({torch.__version__})")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise InputError(f"torch device {show_value(device)}: this machine has {torch.cuda.device_count()} "
                             f"CUDA device(s) (cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    return torch.device(device)


def _check_model(model) -> ModelSpec:
    if not isinstance(model, ModelSpec):
        raise InputError(f"model: expected a ModelSpec, got {type(model).__name__}")
    return model


@dataclass
class LayerStack:
    """Decoder layers with a model's shapes and the head (final norm, OPT's project_out, LM head).

    Each layer is a dict of tensors named as `_layer_shapes` lists them; weights are (out, in) as torch.nn.Linear keeps
    them. `generator` draws the KV caches and inputs of the timed forwards (seeded with `seed`)."""

    model: ModelSpec
    device: object  # torch.device
    dtype: object  # torch.dtype
    seed: int
    layers: list = field(default_factory=list)  # list[dict[str, torch.Tensor]]
    head: dict = field(default_factory=dict)
    generator: object = None

    @property
    def cache_tokens_cap(self) -> int:
        """Cached tokens a new token attends to at most (0: no cap)."""
        return self.model.sliding_window


def _layer_shapes(model: ModelSpec) -> dict[str, tuple[int, ...]]:
    d, h, kv, dh, f = model.d_model, model.n_heads, model.n_kv_heads, model.head_dim, model.d_ffn
    shapes = {"wq": (h * dh, d), "wk": (kv * dh, d), "wv": (kv * dh, d), "wo": (d, h * dh)}
    if model.qkv_bias:
        shapes.update(bq=(h * dh,), bk=(kv * dh,), bv=(kv * dh,))
    if model.o_bias:
        shapes["bo"] = (d,)
    if model.gated_ffn:
        shapes.update(w_gate=(f, d), w_up=(f, d))
    else:
        shapes["w_up"] = (f, d)  # OPT's fc1
    shapes["w_down"] = (d, f)
    if model.ffn_bias:
        shapes.update(b_up=(f,), b_down=(d,))
    for norm in ("attn_norm", "ffn_norm"):
        shapes.update(_norm_shapes(model, norm, d))
    if model.qk_norm:
        shapes.update(q_norm=(dh,), k_norm=(dh,))  # Qwen3: RMSNorm over head_dim
    return shapes


def _norm_shapes(model: ModelSpec, name: str, width: int) -> dict[str, tuple[int, ...]]:
    if not model.norm_affine:
        return {}
    return {name: (width,), f"{name}_bias": (width,)} if model.norm == "layer" else {name: (width,)}


def _random(torch, shape, generator, device, dtype, name: str):
    """std-0.02 normal weights; norm gains around 1 so activations keep their scale."""
    values = torch.randn(shape, generator=generator, device=device, dtype=torch.float32) * WEIGHT_STD
    if name.endswith("norm"):
        values += 1.0
    return values.to(dtype)


def build_layer_stack(model: ModelSpec, layers: int, device: str, dtype: str, seed: int) -> LayerStack:
    """`layers` decoder layers with the model's exact shapes and the head, random normal weights
    (std 0.02; norm gains 1 + N(0, 0.02)) drawn from a torch.Generator seeded with `seed` on the
    device: the same seed on the same device gives the same weights."""
    torch = torch_module()
    _check_model(model)
    _positive("layers", layers)
    _positive("seed", seed, minimum=0)
    torch_device, torch_dtype = check_torch_device(device), getattr(torch, _check_dtype(dtype))
    generator = torch.Generator(device=torch_device)
    generator.manual_seed(seed)
    stack = LayerStack(model=model, device=torch_device, dtype=torch_dtype, seed=seed)
    shapes = _layer_shapes(model)
    for _ in range(layers):
        stack.layers.append({name: _random(torch, shape, generator, torch_device, torch_dtype, name)
                             for name, shape in shapes.items()})
    head_shapes = _norm_shapes(model, "final_norm", model.d_model) if model.final_norm else {}
    if model.d_embed != model.d_model:
        head_shapes["project_out"] = (model.d_embed, model.d_model)
    head_shapes["lm_head"] = (model.vocab_size, model.d_embed)
    stack.head = {name: _random(torch, shape, generator, torch_device, torch_dtype, name)
                  for name, shape in head_shapes.items()}
    stack.generator = torch.Generator(device=torch_device)
    stack.generator.manual_seed(seed + 1)
    return stack


def _norm(torch, x, weights: dict, name: str, model: ModelSpec):
    F = torch.nn.functional
    width = x.shape[-1]
    if model.norm == "layer":
        return F.layer_norm(x, (width,), weights.get(name), weights.get(f"{name}_bias"), eps=1e-5)
    return F.rms_norm(x, (width,), weights.get(name), eps=1e-6)


def cache_tokens(stack: LayerStack, context: int) -> int:
    """Cached tokens the forward attends to: the context, capped by a sliding window."""
    cap = stack.cache_tokens_cap
    return min(context, cap) if cap else context


def attention_mask(torch, stack: LayerStack, n_tokens: int, context: int):
    """Boolean mask (n, cached + n) of the new tokens over the cache: all of it, and each new token
    itself and the new tokens before it. None when one new token needs no mask, or when an empty
    cache leaves the plain causal one (`is_causal`, which lets CUDA pick its flash kernel)."""
    cached = cache_tokens(stack, context)
    if n_tokens == 1 or cached == 0:
        return None
    return torch.ones(n_tokens, cached + n_tokens, dtype=torch.bool, device=stack.device).tril(diagonal=cached)


def make_caches(stack: LayerStack, n_tokens: int, context: int, batch: int) -> list:
    """Per layer a (K, V) pair of shape (batch, kv heads, cached + n, head_dim): the first `cached`
    positions random (the context), the last n written by the forward."""
    torch = torch_module()
    m = stack.model
    shape = (batch, m.n_kv_heads, cache_tokens(stack, context) + n_tokens, m.head_dim)
    return [tuple(_random_values(torch, stack, shape) for _ in range(2)) for _ in stack.layers]


def _random_values(torch, stack: LayerStack, shape):
    """Standard normal values in the stack's dtype from its generator (caches and inputs)."""
    values = torch.randn(shape, generator=stack.generator, device=stack.device, dtype=torch.float32)
    return values.to(stack.dtype)


def rotary_tables(torch, stack: LayerStack, n_tokens: int, cached: int):
    """cos and sin (n, head_dim) of the positions cached .. cached + n - 1 (Hugging Face's rotary
    embedding: frequencies ROPE_BASE^(-2i / head_dim), each used twice), or None for a model with
    learned positions."""
    if stack.model.learned_positions:
        return None
    half = stack.model.head_dim // 2
    inverse = ROPE_BASE ** (-torch.arange(half, device=stack.device, dtype=torch.float32) / half)
    angles = torch.outer(torch.arange(cached, cached + n_tokens, device=stack.device, dtype=torch.float32), inverse)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(stack.dtype), angles.sin().to(stack.dtype)


def _rotate(torch, x, rotary):
    """x (batch, heads, n, head_dim) rotated: x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1)."""
    cos, sin = rotary
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def layer_forward(torch, stack: LayerStack, weights: dict, x, cache, mask, rotary=None):
    """One pre-norm decoder layer on hidden states x (batch, n, d_model); writes the new K and V
    into the last n positions of the cache and attends over all of it. `rotary`: rotary_tables'
    cos and sin of the new tokens' positions (None: no rotation)."""
    F = torch.nn.functional
    m = stack.model
    b, n, _ = x.shape
    h = _norm(torch, x, weights, "attn_norm", m)
    q = F.linear(h, weights["wq"], weights.get("bq")).view(b, n, m.n_heads, m.head_dim).transpose(1, 2)
    k = F.linear(h, weights["wk"], weights.get("bk")).view(b, n, m.n_kv_heads, m.head_dim).transpose(1, 2)
    v = F.linear(h, weights["wv"], weights.get("bv")).view(b, n, m.n_kv_heads, m.head_dim).transpose(1, 2)
    if m.qk_norm:
        q = F.rms_norm(q, (m.head_dim,), weights["q_norm"], eps=1e-6)
        k = F.rms_norm(k, (m.head_dim,), weights["k_norm"], eps=1e-6)
    if rotary is not None:
        q, k = _rotate(torch, q, rotary), _rotate(torch, k, rotary)
    keys, values = cache
    keys[:, :, -n:] = k
    values[:, :, -n:] = v
    causal = mask is None and n > 1 and keys.shape[2] == n  # a prefill: no cache before the new tokens
    grouped = m.n_kv_heads != m.n_heads
    if grouped and mask is not None:  # Hugging Face's repeat_kv before a masked SDPA call
        group = m.n_heads // m.n_kv_heads
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
        grouped = False
    a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal, enable_gqa=grouped)
    x = x + F.linear(a.transpose(1, 2).reshape(b, n, m.n_heads * m.head_dim), weights["wo"], weights.get("bo"))
    h = _norm(torch, x, weights, "ffn_norm", m)
    if m.gated_ffn:
        f = F.silu(F.linear(h, weights["w_gate"])) * F.linear(h, weights["w_up"], weights.get("b_up"))
    else:
        f = F.relu(F.linear(h, weights["w_up"], weights.get("b_up")))
    return x + F.linear(f, weights["w_down"], weights.get("b_down"))


def head_forward(torch, stack: LayerStack, x):
    """Logits (batch, n, vocab) of every position of x: final norm, OPT's project_out, LM head."""
    F = torch.nn.functional
    if stack.model.final_norm:
        x = _norm(torch, x, stack.head, "final_norm", stack.model)
    if "project_out" in stack.head:
        x = F.linear(x, stack.head["project_out"])
    return F.linear(x, stack.head["lm_head"])


def forward(stack: LayerStack, x, caches, mask, head: bool = True, depth: int | None = None):
    """`depth` decoder layers on x (batch, n, d_model), default every layer of the stack once; a
    deeper forward cycles through the stack's layers and their caches (layer i runs layers[i % L]),
    so a model's full depth runs on a few layers' weights. Then the head on all n positions (as a
    verify does) when `head`: logits, else the last hidden states."""
    torch = torch_module()
    depth = len(stack.layers) if depth is None else depth
    n = x.shape[1]
    rotary = rotary_tables(torch, stack, n, caches[0][0].shape[2] - n) if depth else None
    for i in range(depth):
        x = layer_forward(torch, stack, stack.layers[i % len(stack.layers)], x, caches[i % len(caches)], mask, rotary)
    return head_forward(torch, stack, x) if head else x


def _timed(torch, device, call, repeats: int, warmup: int) -> float:
    """Median wall seconds of `call` after `warmup` untimed calls; CUDA is synchronized around each."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    times = []
    with torch.inference_mode():
        for i in range(warmup + repeats):
            sync()
            start = time.perf_counter()
            call()
            sync()
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def _check_timing(n_tokens, context, batch, repeats, warmup) -> None:
    _positive("tokens", n_tokens)
    _positive("context", context, minimum=0)
    _positive("batch", batch)
    _positive("repeats", repeats)
    _positive("warmup", warmup, minimum=0)


def time_forward(stack: LayerStack, n_tokens: int, context: int, batch: int, repeats: int, warmup: int,
                 head: bool = True, depth: int | None = None) -> float:
    """Median wall seconds of one forward of `n_tokens` new tokens per sequence for `batch`
    sequences over a KV cache of `context` random tokens, through `depth` decoder layers (default
    the stack's; 0: the head alone) and, when `head`, the head on all n positions. The caches, mask
    and inputs are made before timing."""
    torch = torch_module()
    _check_timing(n_tokens, context, batch, repeats, warmup)
    if depth is not None:
        _positive("depth", depth, minimum=0)
    with torch.inference_mode():
        caches = make_caches(stack, n_tokens, context, batch) if depth != 0 else []  # the head alone needs none
        mask = attention_mask(torch, stack, n_tokens, context)
        x = _random_values(torch, stack, (batch, n_tokens, stack.model.d_model))
    return _timed(torch, stack.device, lambda: forward(stack, x, caches, mask, head, depth), repeats, warmup)


def layer_weight_bytes(model: ModelSpec, dtype: str) -> int:
    """Bytes of one decoder layer's weights in `dtype` (torch_bench's layout, _layer_shapes)."""
    return sum(math.prod(shape) for shape in _layer_shapes(model).values()) * DTYPE_BYTES[dtype]


def distinct_layers(model: ModelSpec, layers: int, device_type: str, dtype: str) -> int:
    """Decoder layers with their own weights and caches that a full-depth forward cycles through:
    at least `layers`, enough that one cycle's weights (WORKING_SET_BYTES) cannot stay in the
    device's cache between visits, at most the model's depth."""
    cycle = math.ceil(WORKING_SET_BYTES[device_type] / layer_weight_bytes(model, dtype))
    return min(model.n_layers, max(layers, cycle))


def peak_matmul_flops_per_s(device: str, dtype: str, size: int | None = None, repeats: int = 10,
                            seed: int = 0) -> float:
    """Achieved FLOP/s of a square `size` x `size` matmul (2 size^3 FLOPs), median of `repeats`
    after two warm-up calls; size defaults to 8192 on CUDA and 1024 on CPU."""
    torch = torch_module()
    torch_device, torch_dtype = check_torch_device(device), getattr(torch, _check_dtype(dtype))
    size = _positive("size", DEFAULT_MATMUL_SIZE[torch_device.type] if size is None else size)
    _positive("repeats", repeats)
    generator = torch.Generator(device=torch_device)
    generator.manual_seed(_positive("seed", seed, minimum=0))
    a, b = (torch.randn((size, size), generator=generator, device=torch_device).to(torch_dtype) for _ in range(2))
    out = torch.empty((size, size), device=torch_device, dtype=torch_dtype)
    seconds = _timed(torch, torch_device, lambda: torch.matmul(a, b, out=out), repeats, warmup=2)
    return 2.0 * size ** 3 / seconds


def copy_bandwidth_bytes_per_s(device: str, bytes: int | None = None, repeats: int = 10) -> float:
    """Achieved bytes/s of copying a `bytes`-byte tensor into another on the device, counting the
    read and the write (2 x bytes per copy), median of `repeats` after two warm-up calls; bytes
    defaults to 1 GiB on CUDA and 128 MiB on CPU (rounded down to whole float32 values)."""
    torch = torch_module()
    torch_device = check_torch_device(device)
    size = _positive("bytes", DEFAULT_COPY_BYTES[torch_device.type] if bytes is None else bytes, minimum=4) // 4
    _positive("repeats", repeats)
    source = torch.ones(size, device=torch_device, dtype=torch.float32)
    target = torch.empty_like(source)
    seconds = _timed(torch, torch_device, lambda: target.copy_(source), repeats, warmup=2)
    return 2.0 * 4 * size / seconds


def benchmark(model: ModelSpec, device: str, dtype: str, tokens: list[int], contexts: list[int], batches: list[int],
              layers: int = 2, repeats: int = 5, seed: int = 0, warmup: int = 2) -> list[dict]:
    """One record per (n, c, b) of tokens x contexts x batches, in that order:
    {"tokens", "context", "batch", "layers", "depth", "seconds"}.

    `seconds` is the median of whole-model forwards: the model's `depth` = n_layers decoder layers
    and the head, timed as one call, as an eager engine runs them (the host queues layer after layer
    while the device works, so the launches of a layer hide behind the work of the ones before;
    timing a few layers and scaling them up misses that and multiplies their jitter by n_layers / layers).
    The layers cycle through `layers` distinct layers' weights and caches, raised to distinct_layers'
    count so the weights are read from main memory as the real model's are; nothing is extrapolated."""
    _check_model(model)
    _check_dtype(dtype)
    torch_device = check_torch_device(device)
    tokens, contexts = _int_list("tokens", tokens, 1), _int_list("contexts", contexts, 0)
    batches = _int_list("batches", batches, 1)
    _positive("layers", layers)
    _positive("repeats", repeats)
    _positive("warmup", warmup, minimum=0)
    distinct = distinct_layers(model, layers, torch_device.type, dtype)
    stack = build_layer_stack(model, distinct, device, dtype, seed)
    return [{"tokens": n, "context": c, "batch": b, "layers": distinct, "depth": model.n_layers,
             "seconds": time_forward(stack, n, c, b, repeats, warmup, depth=model.n_layers)}
            for n in tokens for c in contexts for b in batches]
