"""Frozen specifications of models, devices, links and systems, validated on construction.

Values are SI (seconds, bytes, ops/s, watts, joules) and counts; field names carry the unit.
`catalog.py` builds these from data files; a bad value raises `SpecError`, which names the field,
the value and what is allowed, so the caller can prefix the file and print one line.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import NamedTuple




class InputError(ValueError):
    """A bad value given by the user (an option, a list, a range): the message is one line."""


class SpecError(InputError):
    """A bad value in a specification: `field` holds `value`, and `allowed` says what may."""

    def __init__(self, field: str, value: object, allowed: str):
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"field '{field}' = {show_value(value)}: {allowed}")


SCALE_BYTES = 2  # one fp16 scale per group of quantised weights
MAX_SHOWN = 60  # characters of a user's value echoed in a one-line message


def shorten(text: str, limit: int = MAX_SHOWN, keep_end: bool = False) -> str:
    """Text cut to `limit` characters with an ellipsis (a path keeps its end: the file name says more)."""
    if len(text) <= limit:
        return text
    return "..." + text[3 - limit:] if keep_end else text[:limit - 3] + "..."


def show_value(value: object, limit: int = MAX_SHOWN, keep_end: bool = False) -> str:
    """A value as a one-line message shows it: floats without binary noise (1e-05, not
    9.999999999999999e-06), strings quoted, anything long cut to `limit` characters."""
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(show_value(v, limit) for v in value[:8]) + (", ...]" if len(value) > 8 else "]")
    else:
        text = repr(value)
    if len(text) <= limit or not keep_end:
        return shorten(text, limit)
    return text[0] + "..." + text[4 - limit:]  # the quote, then the end of the path


def describe(spec: object) -> str:
    """A frozen dataclass's fields as 'name=value, ...' for messages (never the Python repr)."""
    return ", ".join(f"{f.name}={show_value(getattr(spec, f.name))}" for f in dataclasses.fields(spec))


def _require_positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise SpecError(name, value, "must be a positive number")


def _require_non_negative(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise SpecError(name, value, "must be a number >= 0")


def _require_int(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpecError(name, value, "must be a positive integer")


def _require_fraction(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= 1):
            raise SpecError(name, value, "must be a fraction in (0, 1]")


def _require_choice(obj: object, name: str, choices: tuple[str, ...] | list[str]) -> None:
    value = getattr(obj, name)
    if value not in choices:
        raise SpecError(name, value, f"allowed: {', '.join(choices)}")


# Architecture families and the Hugging Face `model_type` that names each.
DEVICE_KINDS = ("gpu", "fpga", "cpu")
# Compute dtype -> the rates tried in order. fp8 and fp4 without their own tensor cores run as
# weight-only formats dequantised to 16-bit (Marlin-style kernels), not at an 8-bit rate.
PEAK_FALLBACKS = {
    "fp16": ("fp16", "bf16", "fp32"),
    "bf16": ("bf16", "fp16", "fp32"),
    "fp8": ("fp8", "fp16", "bf16", "fp32"),
    "fp4": ("fp4", "fp16", "bf16", "fp32"),
    "int8": ("int8", "fp16", "bf16", "fp32"),
    "fp32": ("fp32",),
}
MEMORY_TIERS = ("hbm", "gddr", "ddr")
MAX_LINEAR_ROWS = 64  # entries of DeviceSpec.linear_row_ratios


@dataclass(frozen=True)
class MemoryTier:
    """One off-chip memory of a device: capacity, peak bandwidth and the achieved fraction of it."""

    tier: str
    capacity_bytes: float
    bandwidth_bytes_per_s: float
    efficiency: float

    def __post_init__(self) -> None:
        _require_choice(self, "tier", MEMORY_TIERS)
        _require_positive(self, "capacity_bytes", "bandwidth_bytes_per_s")
        _require_fraction(self, "efficiency")

    @property
    def achieved_bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency


@dataclass(frozen=True)
class FpgaFabric:
    """The FPGA-specific part of a device: DSP array, on-chip SRAM and branch lanes.

    Peak ops/s = pe_dsp_count x 2 (multiply and add) x products_per_dsp x clock (docs/cost-model.md §4).
    """

    dsp_type: str
    dsp_count: int
    pe_dsp_count: int
    products_per_dsp: int
    clock_hz: float
    bram_bytes: float
    uram_bytes: float
    sram_bandwidth_bytes_per_s: float
    sram_efficiency: float
    branch_lanes: int

    def __post_init__(self) -> None:
        _require_int(self, "dsp_count", "pe_dsp_count", "products_per_dsp", "branch_lanes")
        if self.pe_dsp_count > self.dsp_count:
            raise SpecError("pe_dsp_count", self.pe_dsp_count, f"must be <= dsp_count ({self.dsp_count})")
        _require_positive(self, "clock_hz", "bram_bytes", "sram_bandwidth_bytes_per_s")
        _require_non_negative(self, "uram_bytes")
        _require_fraction(self, "sram_efficiency")

    @property
    def sram_bytes(self) -> float:
        return self.bram_bytes + self.uram_bytes

    @property
    def peak_flops_per_s(self) -> float:
        return self.pe_dsp_count * 2 * self.products_per_dsp * self.clock_hz


class ComputePeak(NamedTuple):
    """The dense peak a forward in `requested` runs at on a device, and the dtype that rate belongs to."""

    flops_per_s: float
    dtype: str  # the rate actually used: `requested`, or the wider dtype it fell back to
    requested: str

    @property
    def fell_back(self) -> bool:
        return self.dtype != self.requested


@dataclass(frozen=True)
class DeviceSpec:
    """A compute device (GPU, FPGA or CPU) as the roofline sees it.

    `peak_flops_per_s` maps a compute dtype (fp16, bf16, fp32, fp8, fp4, int8) to dense peak ops/s;
    `memory` lists off-chip tiers, the first one holding weights and KV cache by default.
    """

    name: str
    kind: str
    peak_flops_per_s: tuple[tuple[str, float], ...]
    memory: tuple[MemoryTier, ...]
    eta_compute: float
    layer_overhead_s: float
    forward_overhead_s: float
    tdp_w: float
    decode_power_w: float
    idle_power_w: float
    display_name: str = ""
    price_usd_per_s: float | None = None
    host_link: str | None = None
    peer_link: str | None = None  # GPU to GPU, for stages spread over several (specs/parallel.py)
    fpga: FpgaFabric | None = None
    cores: int | None = None
    source: str = ""
    # How much of the shorter of compute and memory time hides under the longer: 1 is the
    # roofline's max(); 0 adds them (one CPU core running small products, issue 7's calibration).
    compute_memory_overlap: float = 1.0
    # Achieved memory bandwidth of a forward over two or more rows, as a fraction of the one-row
    # figure: BLAS streams weights best in its one-row (gemv) path (issue 7's calibration).
    multi_row_bandwidth_fraction: float = 1.0
    # Time of a forward's linear layers over n = 1, 2, ... rows as a multiple of one row's, measured
    # on this core (issue 7's calibration: BLAS's small-matrix kernels differ per row count, 3 rows
    # slower than 4); weight streaming scales by it in place of multi_row_bandwidth_fraction, and
    # past its end a forward is whole blocks of its last row count. Empty: not measured.
    linear_row_ratios: tuple[float, ...] = ()
    # Fixed work of one drafting round on this device besides its per-level forwards: taking the
    # verdict and re-ingesting accepted tokens it has not cached (issue 7's calibration).
    draft_round_overhead_s: float = 0.0
    # Fixed work of one verification round on this device besides the target's forward over the
    # tree: building its mask and positions, walking the accepted path, compacting the KV cache; an
    # autoregressive step pays none of it (issue 7's calibration; 0 elsewhere).
    verify_round_overhead_s: float = 0.0
    # The serving engine whose fitted kernels price this GPU's forwards (specs/engines.py); None
    # is the plain roofline with the efficiencies and overheads above.
    engine: object | None = None
    # GPUs: the kernels' family, an architecture and a market (ampere-datacenter, ada-geforce, hopper,
    # ...): engine profiles scale their efficiencies per class (docs/engines.md); "" for none
    device_class: str = ""
    # GeForce tensor cores run FP16 products with FP16 accumulation at twice the FP32-accumulate rate
    # (peak_fp16 holds the latter); engines whose GEMMs accumulate in FP16 (llama.cpp) reach this one
    fp16_accumulate_peak_flops_per_s: float | None = None
    # Hopper reaches its dense tensor peak only through warpgroup MMAs (wgmma); kernels written with
    # Ampere's warp-level mma.sync (llama.cpp's) reach this fraction of it (1: no such limit)
    mma_sync_fraction: float = 1.0
    # A calibrated device names the profile fitted to its own forwards (`calibrate --torch-device`);
    # it prices the device whatever --engine says
    own_engine: str = ""
    # A group of these devices (specs/parallel.py: ParallelGroup); None for one device
    parallel: object | None = None

    def __post_init__(self) -> None:
        _require_choice(self, "kind", DEVICE_KINDS)
        if self.device_class and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,39}", self.device_class):
            raise SpecError("device_class", self.device_class, "lower-case letters, digits and '-', up to 40")
        if self.engine is not None and self.kind == "fpga":
            raise SpecError("engine", getattr(self.engine, "name", self.engine), "engine profiles price GPUs and CPUs, "
                            "not FPGAs")
        if not self.memory:
            raise SpecError("memory", [], "a device needs at least one memory tier")
        if (self.kind == "fpga") != (self.fpga is not None):
            raise SpecError("fpga", self.fpga, "FPGA fabric fields are required for kind 'fpga' and only for it")
        for dtype, peak in self.peak_flops_per_s:
            if not (isinstance(peak, (int, float)) and math.isfinite(peak) and peak > 0):
                raise SpecError(f"peak_{dtype}", peak, "must be a positive number")
        _require_fraction(self, "eta_compute")
        _require_non_negative(self, "layer_overhead_s", "forward_overhead_s", "idle_power_w", "draft_round_overhead_s",
                                 "verify_round_overhead_s")
        if not 0.0 <= self.compute_memory_overlap <= 1.0:
            raise SpecError("overlap", self.compute_memory_overlap, "must be a fraction in [0, 1]")
        if not 0.0 < self.multi_row_bandwidth_fraction <= 1.0:
            raise SpecError("multi_row_bandwidth", self.multi_row_bandwidth_fraction, "must be a fraction in (0, 1]")
        if not 0.0 < self.mma_sync_fraction <= 1.0:
            raise SpecError("mma_sync_fraction", self.mma_sync_fraction, "must be a fraction in (0, 1]")
        ratios = self.linear_row_ratios
        if ratios and not (len(ratios) <= MAX_LINEAR_ROWS and ratios[0] == 1.0
                           and all(isinstance(r, float) and math.isfinite(r) and 0.0 < r <= 4.0 * n
                                   for n, r in enumerate(ratios, 1))):
            raise SpecError("linear_row_ratios", list(ratios), f"up to {MAX_LINEAR_ROWS} numbers, the first 1.0, "
                            "the n-th in (0, 4n]")
        _require_positive(self, "tdp_w", "decode_power_w")
        if self.decode_power_w > self.tdp_w:
            raise SpecError("decode_power", self.decode_power_w, f"must be <= tdp ({self.tdp_w} W)")
        if self.idle_power_w > self.decode_power_w:
            raise SpecError("idle_power", self.idle_power_w, f"must be <= decode_power ({self.decode_power_w} W)")

    def compute_peak(self, dtype: str) -> ComputePeak:
        """Dense peak ops/s for a compute dtype (fp16, bf16, fp32, fp8, fp4, int8), and whose rate it is.

        A missing low-precision rate falls back to a wider one the device has (fp8, fp4 and int8
        weights dequantised to fp16/bf16, half precision computed in fp32): slower, never faster.
        The result names the dtype actually used, so callers can say so. fp32 has no fallback:
        costing it at a half-precision rate would be optimistic.
        """
        table = dict(self.peak_flops_per_s)
        for candidate in PEAK_FALLBACKS.get(dtype, (dtype,)):
            if candidate in table:
                return ComputePeak(table[candidate], candidate, dtype)
        raise SpecError(f"peak_{dtype}", None, f"device '{self.name}' states no {dtype} peak; "
                                               f"it has {', '.join(table)}")

    def peak_for(self, dtype: str) -> float:
        """Dense peak ops/s for a compute dtype, after any fallback (see `compute_peak`)."""
        return self.compute_peak(dtype).flops_per_s

    @property
    def main_memory(self) -> MemoryTier:
        return self.memory[0]

    @property
    def memory_capacity_bytes(self) -> float:
        """Off-chip capacity, all tiers together."""
        return sum(t.capacity_bytes for t in self.memory)


# infinity-fabric: AMD xGMI between Instinct GPUs; infiniband: RDMA between nodes (docs/data-format.md)
LINK_TYPES = ("pcie", "cxl", "nvlink", "infinity-fabric", "ethernet-rdma", "infiniband", "local")
LINK_PATHS = ("host-staged", "peer-to-peer")


@dataclass(frozen=True)
class LinkSpec:
    """A device-to-device link: per-hop latency alpha, per-direction bandwidth beta, hops.

    Time for B bytes = hops x (latency_s + B / (efficiency x bandwidth)) + software_overhead_s.
    """

    name: str
    link_type: str
    path: str
    bandwidth_bytes_per_s: float
    efficiency: float
    latency_s: float
    hops: int
    software_overhead_s: float
    energy_j_per_bit: float
    display_name: str = ""
    source: str = ""
    # A collective (all-reduce, all-gather) among GPUs on this link: a fixed start plus one latency per
    # step of its algorithm (ring: 2(N-1) steps for an all-reduce); costs/parallel.py
    collective_base_latency_s: float = 0.0
    collective_step_latency_s: float = 0.0

    def __post_init__(self) -> None:
        _require_choice(self, "link_type", LINK_TYPES)
        _require_choice(self, "path", LINK_PATHS)
        _require_positive(self, "bandwidth_bytes_per_s")
        _require_fraction(self, "efficiency")
        _require_non_negative(self, "latency_s", "software_overhead_s", "energy_j_per_bit", "collective_base_latency_s",
                              "collective_step_latency_s")
        _require_int(self, "hops")

    @property
    def achieved_bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency


@dataclass(frozen=True)
class SystemSpec:
    """Where each stage runs: the draft device, the verify device and the link between them.

    A link is required when the two stages run on different devices and must be absent when they
    share one.
    """

    draft: DeviceSpec
    verify: DeviceSpec
    link: LinkSpec | None = None

    def __post_init__(self) -> None:
        same = self.draft.name == self.verify.name
        if same and self.link is not None:
            raise SpecError("link", self.link.name, "must be omitted when draft and verify share a device")
        if not same and self.link is None:
            raise SpecError("link", None, "a link is required between two devices")


@dataclass(frozen=True)
class CalibrationDefaults:
    """Achieved fractions, fixed overheads and power fractions applied where a device is silent."""

    eta: tuple[tuple[str, float], ...]
    overhead_s: tuple[tuple[str, float], ...]
    power_fraction: tuple[tuple[str, float], ...]
    sync_per_round_s: float
    token_record_bytes: int

    def eta_for(self, key: str) -> float:
        return dict(self.eta)[key]

    def overhead_for(self, key: str) -> float:
        return dict(self.overhead_s)[key]

    def power_fraction_for(self, key: str) -> float:
        return dict(self.power_fraction)[key]


