"""SI constants and the conversion of vendor units into SI.

This is the one place where vendor units (TB/s, TFLOPS, MHz, pJ/bit, ...) meet the SI values used
everywhere else. `catalog.py` calls `to_si` once per number when a data file is read; nothing
downstream multiplies by 1e9. Imports nothing.
"""

# Dimensions of the quantities that appear in data files. A unit belongs to exactly one.
FLOP_PER_S = "ops per second"
BYTES_PER_S = "bandwidth"
BYTES = "size"
HZ = "clock"
WATTS = "power"
SECONDS = "time"
J_PER_BIT = "energy per bit"
USD_PER_S = "price"
COUNT = "count"
FRACTION = "fraction"

# unit -> (dimension, factor to SI). GB/s = 1e9 B/s, the decimal prefix vendor datasheets print
# (docs/data-format.md, "Quantities"); Gb/s counts bits.
UNITS: dict[str, tuple[str, float]] = {
    "TFLOPS": (FLOP_PER_S, 1e12),
    "TOPS": (FLOP_PER_S, 1e12),
    "GFLOPS": (FLOP_PER_S, 1e9),
    "TB/s": (BYTES_PER_S, 1e12),
    "GB/s": (BYTES_PER_S, 1e9),
    "MB/s": (BYTES_PER_S, 1e6),
    "Gb/s": (BYTES_PER_S, 1e9 / 8),
    "TB": (BYTES, 1e12),
    "GB": (BYTES, 1e9),
    "GiB": (BYTES, 2.0**30),
    "MB": (BYTES, 1e6),
    "MiB": (BYTES, 2.0**20),
    "KB": (BYTES, 1e3),
    "GHz": (HZ, 1e9),
    "MHz": (HZ, 1e6),
    "W": (WATTS, 1.0),
    "s": (SECONDS, 1.0),
    "ms": (SECONDS, 1e-3),
    "us": (SECONDS, 1e-6),
    "ns": (SECONDS, 1e-9),
    "pJ/bit": (J_PER_BIT, 1e-12),
    "USD/h": (USD_PER_S, 1.0 / 3600.0),
    "count": (COUNT, 1.0),
    "fraction": (FRACTION, 1.0),
}

# Provenance tags (docs/data-format.md).
TAGS = ("datasheet", "measured", "paper", "derived", "unverified")

BITS_PER_BYTE = 8

# Bytes per stored value for the dtypes a config.json names (`torch_dtype`) or a user asks for.
DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "fp32": 4.0,
    "float16": 2.0,
    "fp16": 2.0,
    "bfloat16": 2.0,
    "bf16": 2.0,
    "int8": 1.0,
    "fp8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,  # FP4 (E2M1) values; the block scales (NVFP4: one FP8 scale per 16 values) are not counted
}

# Canonical compute dtype for a storage dtype: which peak ops/s a forward runs at.
DTYPE_COMPUTE: dict[str, str] = {
    "float32": "fp32",
    "fp32": "fp32",
    "float16": "fp16",
    "fp16": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "int8": "int8",
    # fp8 and fp4 run at the device's fp8 / fp4 tensor peak. A device without one (A100, RTX 3090:
    # no fp8; everything before Blackwell: no fp4) falls back to a wider rate, which
    # DeviceSpec.compute_peak reports and the cost layer turns into a warning (docs/cost-model.md §4).
    "fp8": "fp8",
    "fp4": "fp4",
    # Weight-only int4 dequantises to fp16 before the matmul, by definition: no fallback, no warning.
    "int4": "fp16",
}


def units_of(dimension: str) -> list[str]:
    """The units accepted for one dimension, in table order."""
    return [u for u, (dim, _) in UNITS.items() if dim == dimension]


def to_si(value: float, unit: str, dimension: str) -> float:
    """Convert `value` given in `unit` to SI.

    Raises:
        ValueError: the unit is unknown or belongs to another dimension; the message lists the
            units allowed for `dimension`.
    """
    known = UNITS.get(unit)
    if known is None or known[0] != dimension:
        raise ValueError(f"unit {unit!r} is not a unit of {dimension}; allowed: {', '.join(units_of(dimension))}")
    return float(value) * known[1]
