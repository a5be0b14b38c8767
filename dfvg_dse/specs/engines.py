"""Serving-engine profiles: what an engine's kernels achieve on a GPU (docs/engines.md).

The roofline alone gives every engine the same efficiencies and a hard corner between the memory-
and compute-bound regimes. A profile replaces them, for one engine on GPUs, with parameters fitted
to published forward measurements (hwdb/measurements, dfvg_dse/validation/engines.py):

    t = S_q((T_c^p + T_m^p)^(1/p), L x t_layer) + t_forward + b x t_sequence,   S_q(x, y) = (x^q + y^q)^(1/q)

with T_c = FLOPs / (peak(dtype) x eta_c[dtype] x M / (M + M_half)) (M = GEMM rows, new tokens x batch; for attention's
FLOPs, at eta_attn of that rate, M = new tokens per sequence x the query heads one tile holds:
a KV head's GQA group, or one where the engine's kernel runs per query head) and T_m = weight bytes / (bandwidth x eta_m[dtype])
+ KV bytes / (bandwidth x eta_m[16-bit]); p (the transition's sharpness) bends the corner as measured
t(n) curves do (p -> infinity is the plain max); t_sequence is the engine's work per sequence of a
batch of b on every step (sampling, scheduling, the host's bookkeeping), which a verify of many
tokens of one sequence pays once; q is how far the host's per-layer kernel launches overlap the
kernels they queue (1: they add, as with a host sync per layer; large: the slower of the two, as an
eager engine that launches asynchronously runs). Weight bytes count the group scales of quantised
weights (`scale_bytes` per group of `group_size` values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dfvg_dse.specs.hardware import SpecError
from dfvg_dse.specs.model import ModelSpec

# weight dtype -> the class whose kernels price it (fp16 and bf16 share kernels)
WEIGHT_CLASSES = {"float16": "16bit", "fp16": "16bit", "bfloat16": "16bit", "bf16": "16bit",
                  "fp8": "fp8", "int8": "int8", "int4": "int4", "fp4": "fp4", "float32": "32bit", "fp32": "32bit"}
CLASSES = ("16bit", "fp8", "int8", "int4", "fp4", "32bit")
MAX_SHARPNESS = 64.0  # p past this is the hard max to 1%
MAX_OVERHEAD_S = 0.1
MAX_SCALE = 10.0
MAX_HALF_ROWS = 4096.0


def query_heads_per_tile(model: ModelSpec, per_head_classes) -> int:
    """The query heads one attention tile holds per new token: a KV head's GQA group
    (ModelSpec.query_heads_per_kv), or 1 where the KV cache's class is one of `per_head_classes`, whose
    kernel runs per query head (EngineProfile.per_head_attention). MLA keeps every head in the tile:
    its absorbed kernels share one latent, and no engine runs them per head."""
    if model.mla is None and weight_class(model.kv_dtype) in per_head_classes:
        return 1
    return model.query_heads_per_kv


def weight_class(dtype: str) -> str:
    """The kernel class of a weight dtype (16bit, fp8, int8, int4, fp4, 32bit)."""
    if dtype not in WEIGHT_CLASSES:
        raise SpecError("weight dtype", dtype, f"allowed: {', '.join(WEIGHT_CLASSES)}")
    return WEIGHT_CLASSES[dtype]


@dataclass(frozen=True)
class KernelEfficiency:
    """Achieved fractions of a GPU's peak bandwidth and dense compute for one weight class."""

    weight_class: str
    bandwidth_efficiency: float
    compute_efficiency: float

    def __post_init__(self) -> None:
        if self.weight_class not in CLASSES:
            raise SpecError("weight_class", self.weight_class, f"allowed: {', '.join(CLASSES)}")
        for name in ("bandwidth_efficiency", "compute_efficiency"):
            value = getattr(self, name)
            if not (isinstance(value, float) and math.isfinite(value) and 0.0 < value <= 1.0):
                raise SpecError(name, value, "must be a fraction in (0, 1]")


@dataclass(frozen=True)
class EngineProfile:
    """One serving engine on GPUs: kernel efficiencies per weight class, fixed overheads and the
    sharpness of the memory/compute transition. A class without kernels is priced as the nearest
    wider one it has (int4 -> int8 -> 16bit), and the cost layer says so."""

    name: str
    kernels: tuple[KernelEfficiency, ...]
    forward_overhead_s: float
    layer_overhead_s: float
    sharpness: float
    attention_efficiency: float = 1.0  # attention FLOPs run at this fraction of the GEMMs' rate
    half_rows: float = 0.0  # GEMMs of M rows reach M / (M + half_rows) of the kernels' compute efficiency
    sequence_overhead_s: float = 0.0  # per sequence of the batch, per forward
    host_overlap: float = 1.0  # q: per-layer launches and kernels combine as (x^q + y^q)^(1/q); 1 adds them
    fp16_accumulate: bool = False  # 16-bit GEMMs accumulate in FP16 (GeForce: twice the FP32-accumulate rate)
    mma_sync_only: bool = False  # GEMMs issue warp-level mma.sync only (DeviceSpec.mma_sync_fraction of Hopper's peak)
    # KV-cache classes whose attention kernel gives each query head its own tile, not a KV head's whole
    # GQA group (vLLM 0.5-0.6: an fp8 KV cache runs its PagedAttention kernel, one thread block per query head)
    per_head_attention: tuple[str, ...] = ()
    device_scales: tuple[tuple[str, float, float], ...] = ()  # (device class, compute, bandwidth factor)
    source: str = ""

    def __post_init__(self) -> None:
        if not self.kernels or all(k.weight_class != "16bit" for k in self.kernels):
            raise SpecError("kernels", [k.weight_class for k in self.kernels], "a profile needs the 16bit kernels")
        if len({k.weight_class for k in self.kernels}) != len(self.kernels):
            raise SpecError("kernels", [k.weight_class for k in self.kernels], "each weight class once")
        for name in ("forward_overhead_s", "layer_overhead_s", "sequence_overhead_s"):
            value = getattr(self, name)
            if not (isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= MAX_OVERHEAD_S):
                raise SpecError(name, value, f"must be in [0, {MAX_OVERHEAD_S:g}] s")
        if not (isinstance(self.sharpness, float) and 1.0 <= self.sharpness <= MAX_SHARPNESS):
            raise SpecError("sharpness", self.sharpness, f"must be in [1, {MAX_SHARPNESS:g}]")
        if not (isinstance(self.host_overlap, float) and 1.0 <= self.host_overlap <= MAX_SHARPNESS):
            raise SpecError("host_overlap", self.host_overlap, f"must be in [1, {MAX_SHARPNESS:g}]")
        if not (isinstance(self.half_rows, float) and 0.0 <= self.half_rows <= MAX_HALF_ROWS):
            raise SpecError("half_rows", self.half_rows, f"must be in [0, {MAX_HALF_ROWS:g}] rows")
        if not (isinstance(self.attention_efficiency, float) and 0.0 < self.attention_efficiency <= 1.0):
            raise SpecError("attention_efficiency", self.attention_efficiency, "must be a fraction in (0, 1]")
        if any(c not in CLASSES for c in self.per_head_attention) or len(set(self.per_head_attention)) != len(
                self.per_head_attention):
            raise SpecError("per_head_attention", list(self.per_head_attention), f"each once, of {', '.join(CLASSES)}")
        for name, compute, bandwidth in self.device_scales:
            for field, value in (("compute", compute), ("bandwidth", bandwidth)):
                if not (isinstance(value, float) and math.isfinite(value) and 0.0 < value <= MAX_SCALE):
                    raise SpecError(f"device_scales.{name}.{field}", value, f"must be in (0, {MAX_SCALE:g}]")

    def query_heads_per_tile(self, model: ModelSpec) -> int:
        """The query heads one attention tile holds per new token under this profile."""
        return query_heads_per_tile(model, self.per_head_attention)

    def scales(self, device_class: str) -> tuple[float, float]:
        """(compute, bandwidth) factors of a device class on the kernels' efficiencies; (1, 1) if none."""
        return next(((c, b) for name, c, b in self.device_scales if name == device_class), (1.0, 1.0))

    def lacks_scales(self, device_class: str) -> bool:
        """True when the profile fitted factors for some device classes but not this one, so a device
        of this class is priced unscaled, at (1, 1) (a profile fitted without classes is unscaled for all)."""
        return bool(self.device_scales) and all(name != device_class for name, _, _ in self.device_scales)

    def kernel(self, dtype: str) -> tuple[KernelEfficiency, bool]:
        """The kernels that price weights of `dtype`, and whether they are another class's (a fallback)."""
        wanted = weight_class(dtype)
        have = {k.weight_class: k for k in self.kernels}
        for name in (wanted,) + FALLBACKS.get(wanted, ()):
            if name in have:
                return have[name], name != wanted
        return have["16bit"], True


FALLBACKS = {"int4": ("int8", "16bit"), "fp4": ("fp8", "int8", "16bit"), "fp8": ("int8", "16bit"),
             "int8": ("16bit",), "32bit": ("16bit",)}
