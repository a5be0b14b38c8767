"""Parsers of hwdb/: devices (GPU, FPGA, CPU), links and calibration defaults."""

from __future__ import annotations

import difflib
import re
from pathlib import Path


from dfvg_dse import units
from dfvg_dse.catalog._io import HwEntry, Quantity, check_provenance, parse_quantity, read_string
from dfvg_dse.catalog.errors import _MISSING, CatalogError, DataError
from dfvg_dse.specs import (MEMORY_TIERS, CalibrationDefaults, DeviceSpec, FpgaFabric, LinkSpec, MemoryTier,
                            SpecError)


# Per kind: field -> (dimension, required, positive). Strings and [[memory]] are handled apart.
_COMMON = {
    "tdp": (units.WATTS, True, True),
    "decode_power": (units.WATTS, False, True),
    "idle_power": (units.WATTS, False, False),
    "eta_compute": (units.FRACTION, False, True),
    "layer_overhead": (units.SECONDS, False, False),
    "forward_overhead": (units.SECONDS, False, False),
    "overlap": (units.FRACTION, False, False),
    "multi_row_bandwidth": (units.FRACTION, False, True),
    "draft_round_overhead": (units.SECONDS, False, False),
    "verify_round_overhead": (units.SECONDS, False, False),
    "price_per_hour": (units.USD_PER_S, False, True),
}
# Dense tensor peaks per dtype; a missing one falls back with a warning (specs.DeviceSpec.compute_peak).
_PEAKS = {f"peak_{d}": (units.FLOP_PER_S, False, True)
          for d in ("fp16", "bf16", "fp32", "int8", "fp8", "fp4", "fp16_fp16acc")}
QUANTITY_FIELDS = {
    "gpu": {**_COMMON, **_PEAKS, "peak_fp16": (units.FLOP_PER_S, True, True), "onchip_sram": (units.BYTES, False, True),
            "mma_sync_fraction": (units.FRACTION, False, True)},
    "cpu": {**_COMMON, **_PEAKS, "peak_fp32": (units.FLOP_PER_S, True, True), "cores": (units.COUNT, True, True),
            "clock": (units.HZ, True, True), "llc": (units.BYTES, False, True)},
    "fpga": {**_COMMON, "dsp_count": (units.COUNT, True, True), "pe_dsp_count": (units.COUNT, False, True),
             "products_per_dsp": (units.COUNT, True, True), "clock": (units.HZ, True, True),
             "bram": (units.BYTES, True, True), "uram": (units.BYTES, True, False),
             "sram_bandwidth": (units.BYTES_PER_S, True, True), "branch_lanes": (units.COUNT, True, True)},
    "link": {"lanes": (units.COUNT, False, True), "bandwidth": (units.BYTES_PER_S, True, True),
             "efficiency": (units.FRACTION, False, True), "latency": (units.SECONDS, True, False),
             "hops": (units.COUNT, True, True), "software_overhead": (units.SECONDS, False, False),
             "energy_per_bit": (units.J_PER_BIT, True, False),
             "collective_base_latency": (units.SECONDS, False, False),
             "collective_step_latency": (units.SECONDS, False, False)},
}
STRING_FIELDS = {
    "gpu": {"host_link", "peer_link", "device_class", "engine"}, "cpu": {"host_link", "engine"}, "fpga": {"host_link", "dsp_type"},
    "link": {"link_type", "path", "generation"},
}
_BASE_FIELDS = {"name", "kind", "display_name", "notes"}
TABLE_FIELDS = {"cpu": {"linear_row_ratios"}}  # a list of numbers with one tag and source
# AMD Versal, AMD UltraScale+, Intel Stratix 10 NX, other Intel FPGAs (docs/data-format.md)
DSP_TYPES = ("DSP58", "DSP48E2", "AI Tensor Block", "variable-precision DSP")


def _span(low: float, low_unit: str, high: float, high_unit: str) -> tuple[float, float, str]:
    """A plausible range in SI, with how a message prints it (in the units a datasheet would use)."""
    si = {u: factor for u, (_, factor) in units.UNITS.items()}
    low_text, high_text = (f"{x:,g}" + ("" if u == "count" else f" {u}") for x, u in ((low, low_unit), (high, high_unit)))
    return low * si[low_unit], high * si[high_unit], f"{low_text} to {high_text}"


# Plausible ranges of hardware values, inclusive, in SI (the table in docs/data-format.md,
# "Plausible ranges"). Deliberately wide: every shipped entry and every device sold in 2026 fits
# (B200/B300/GB300 at 8 TB/s HBM3e, MI355X, Rubin's HBM4; FPGAs near 1 GHz, Versal AI Engines at
# 1.3 GHz; NVLink-5 at 1.8 TB/s), so a value outside is a slip of unit or digits (a 300 GHz FPGA
# clock, 1,008 TB/s typed for 1,008 GB/s), not a fast device. Key: field, or kind:field.
PLAUSIBLE = {
    "tdp": _span(0.1, "W", 5000, "W"), "decode_power": _span(0.1, "W", 5000, "W"),
    "idle_power": _span(0, "W", 5000, "W"),
    "layer_overhead": _span(0, "s", 1, "s"), "forward_overhead": _span(0, "s", 1, "s"),
    "draft_round_overhead": _span(0, "s", 1, "s"), "verify_round_overhead": _span(0, "s", 1, "s"),
    "price_per_hour": _span(0, "USD/h", 1000, "USD/h"),
    "memory.capacity": _span(1, "MB", 16, "TB"), "memory.bandwidth": _span(0.1, "GB/s", 100, "TB/s"),
    "gpu:peak": _span(0.1, "TFLOPS", 200000, "TFLOPS"), "cpu:peak": _span(0.1, "GFLOPS", 2000, "TFLOPS"),
    "gpu:onchip_sram": _span(0.1, "MB", 4, "GB"),
    "cpu:cores": _span(1, "count", 2048, "count"), "cpu:clock": _span(100, "MHz", 10, "GHz"),
    "cpu:llc": _span(0.1, "MB", 8, "GB"),
    "fpga:dsp_count": _span(1, "count", 100000, "count"), "fpga:pe_dsp_count": _span(1, "count", 100000, "count"),
    "fpga:products_per_dsp": _span(1, "count", 128, "count"), "fpga:clock": _span(10, "MHz", 2, "GHz"),
    "fpga:bram": _span(0.01, "MB", 1, "GB"), "fpga:uram": _span(0, "MB", 1, "GB"),
    "fpga:sram_bandwidth": _span(1, "GB/s", 500, "TB/s"), "fpga:branch_lanes": _span(1, "count", 1024, "count"),
    "link:bandwidth": _span(1, "MB/s", 10, "TB/s"), "link:lanes": _span(1, "count", 128, "count"),
    "link:latency": _span(0, "s", 1, "s"), "link:hops": _span(1, "count", 16, "count"),
    "link:software_overhead": _span(0, "s", 1, "s"), "link:energy_per_bit": _span(0, "pJ/bit", 1000, "pJ/bit"),
    "defaults:overhead": _span(0, "s", 1, "s"), "defaults:link.sync_per_round": _span(0, "s", 1, "s"),
    "defaults:link.token_record_bytes": _span(1, "count", 65536, "count"),
}


def plausible_range(kind: str, field: str) -> tuple[float, float, str] | None:
    """The plausible range of one field of a `kind` entry (None: fractions, which (0, 1] bounds)."""
    generic = re.sub(r"^memory\[\d+\]", "memory", field)
    group = "peak" if generic.startswith("peak_") else generic.split(".")[0]
    for key in (f"{kind}:{generic}", f"{kind}:{group}", generic):
        if key in PLAUSIBLE:
            return PLAUSIBLE[key]
    return None


def check_plausible(path: Path, kind: str, field: str, quantity: Quantity) -> None:
    """One line naming file, field, value and range when a number is outside its plausible range."""
    span = plausible_range(kind, field)
    if span is not None and not span[0] <= quantity.si <= span[1]:
        unit = "" if quantity.unit == "count" else f" {quantity.unit}"
        raise CatalogError(f"{path}: field '{field}' = {quantity.value:g}{unit}: outside the plausible "
                           f"range of a {kind} entry, {span[2]}; check the value and its unit "
                           "(docs/data-format.md, 'Plausible ranges')")


FIELDS_SHOWN = 5  # field names an unknown field's one-line error lists


def _check_header(path: Path, data: dict, kind: str) -> None:
    if data.get("kind") != kind:
        raise DataError(path, "kind", data.get("kind", _MISSING), f"must be '{kind}' for a file under {kind}/")
    if data.get("name") != path.stem:
        raise DataError(path, "name", data.get("name", _MISSING), f"must equal the file name '{path.stem}'")
    allowed = (_BASE_FIELDS | set(QUANTITY_FIELDS[kind]) | STRING_FIELDS[kind] | TABLE_FIELDS.get(kind, set())
               | ({"memory"} if kind != "link" else set()))
    for field in data:
        if field not in allowed:
            close = difflib.get_close_matches(field, sorted(allowed), n=1)
            names = sorted(allowed)  # a kind has up to 28 fields: all of them would not fit one line, and the
            # line already holds the path, the field and its value (each up to 60 characters): a few names
            shown = (f"did you mean '{close[0]}'? ({len(names)} fields allowed" if close else
                     f"allowed: {', '.join(names[:FIELDS_SHOWN])}, ... ({len(names)} in all")
            raise DataError(path, field, data[field], f"unknown field; {shown}, docs/data-format.md)")


def _quantities(path: Path, data: dict, kind: str) -> dict[str, Quantity]:
    found = {}
    for field, (dimension, required, positive) in QUANTITY_FIELDS[kind].items():
        if field in data:
            found[field] = parse_quantity(path, field, data[field], dimension, positive)
            check_plausible(path, kind, field, found[field])
        elif required:
            raise DataError(path, field, _MISSING, f"required for a {kind} entry")
    return found


_SI_SUFFIX = re.compile(r"_(w|s|hz|bytes|bytes_per_s|j_per_bit|usd)$")


def _spec_error(path: Path, err: SpecError, prefix: str = "") -> DataError:
    """Re-word a spec's complaint with the file's field name (the spec's without its SI suffix)."""
    return DataError(path, prefix + _SI_SUFFIX.sub("", err.field), err.value, err.allowed)


def _memory_tiers(path: Path, data: dict, kind: str, defaults: CalibrationDefaults,
                  found: dict[str, Quantity]) -> tuple[MemoryTier, ...]:
    """The [[memory]] tables as MemoryTier specs; their quantities are added to `found`."""
    raw = data.get("memory", _MISSING)
    if not isinstance(raw, list) or not raw:
        raise DataError(path, "memory", raw, "needs one or more [[memory]] tables")
    tiers = []
    for i, table in enumerate(raw):
        field = f"memory[{i}]"
        if not isinstance(table, dict):
            raise DataError(path, field, table, "must be a table")
        for key in table:
            if key not in ("tier", "capacity", "bandwidth", "efficiency"):
                raise DataError(path, f"{field}.{key}", table[key], "allowed keys: tier, capacity, bandwidth, efficiency")
        tier = table.get("tier", _MISSING)
        known = ("hbm", "ddr") if kind == "fpga" else MEMORY_TIERS  # an FPGA's defaults know these two
        if not isinstance(tier, str) or tier not in known:
            raise DataError(path, f"{field}.tier", tier, f"allowed for a {kind} entry: {', '.join(known)}")
        if any(t.tier == tier for t in tiers):  # placement and the FPGA defaults pick a tier by name
            raise DataError(path, f"{field}.tier", tier, "each tier once: an earlier [[memory]] table names it")
        if kind == "fpga":
            default_eta = defaults.eta_for(f"fpga_{tier}_bandwidth")
        else:
            default_eta = defaults.eta_for(f"{kind}_bandwidth")
        capacity = parse_quantity(path, f"{field}.capacity", table.get("capacity", _MISSING), units.BYTES)
        bandwidth = parse_quantity(path, f"{field}.bandwidth", table.get("bandwidth", _MISSING), units.BYTES_PER_S)
        found[f"{field}.capacity"], found[f"{field}.bandwidth"] = capacity, bandwidth
        check_plausible(path, kind, f"{field}.capacity", capacity)
        check_plausible(path, kind, f"{field}.bandwidth", bandwidth)
        eta = table.get("efficiency")
        if eta is not None:
            found[f"{field}.efficiency"] = parse_quantity(path, f"{field}.efficiency", eta, units.FRACTION)
        eta_si = default_eta if eta is None else found[f"{field}.efficiency"].si
        try:
            tiers.append(MemoryTier(tier, capacity.si, bandwidth.si, eta_si))
        except SpecError as err:
            raise _spec_error(path, err, f"{field}.") from None
    return tuple(tiers)


def _ratio_table(path: Path, data: dict, field: str) -> tuple[float, ...]:
    """A {values, tag, source} table of positive numbers (a calibrated core's linear_row_ratios);
    () when absent. The numbers' meaning is checked by the spec."""
    raw = data.get(field)
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise DataError(path, field, raw, "must be a table {values, tag, source}")
    extra = sorted(set(raw) - {"values", "tag", "source"})
    if extra:
        raise DataError(path, f"{field}.{extra[0]}", raw[extra[0]], "allowed keys: values, tag, source")
    values = raw.get("values", _MISSING)
    if not (isinstance(values, list) and values and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                          for v in values)):
        raise DataError(path, f"{field}.values", values, "must be a non-empty list of numbers")
    check_provenance(path, field, raw)
    return tuple(float(v) for v in values)


def parse_device(path: Path, data: dict, kind: str, defaults: CalibrationDefaults) -> HwEntry:
    """Build a DeviceSpec from one hwdb/{gpu,fpga,cpu}/NAME.toml document."""
    _check_header(path, data, kind)
    q = _quantities(path, data, kind)
    tdp = q["tdp"].si

    def si(field: str, fallback: float) -> float:
        return q[field].si if field in q else fallback

    fabric = None
    if kind == "fpga":
        dsp_type = read_string(path, data, "dsp_type")
        if dsp_type not in DSP_TYPES:
            raise DataError(path, "dsp_type", dsp_type, f"allowed: {', '.join(DSP_TYPES)}")
        try:
            fabric = FpgaFabric(
                dsp_type=dsp_type, dsp_count=int(q["dsp_count"].si),
                pe_dsp_count=int(si("pe_dsp_count", q["dsp_count"].si)),
                products_per_dsp=int(q["products_per_dsp"].si), clock_hz=q["clock"].si,
                bram_bytes=q["bram"].si, uram_bytes=q["uram"].si,
                sram_bandwidth_bytes_per_s=q["sram_bandwidth"].si,
                sram_efficiency=defaults.eta_for("fpga_sram_bandwidth"), branch_lanes=int(q["branch_lanes"].si))
        except SpecError as err:
            raise _spec_error(path, err) from None
        # Half precision and int8 use the packed products; fp32 one MAC per DSP per cycle (DSP58's
        # native DSPFP32 mode; optimistic for DSP48E2 parts, which need several DSPs per fp32 product).
        peaks = tuple((d, fabric.peak_flops_per_s) for d in ("fp16", "bf16", "int8"))
        peaks += (("fp32", fabric.pe_dsp_count * 2 * fabric.clock_hz),)
    else:
        peaks = tuple((f[5:], quantity.si) for f, quantity in q.items()
                      if f.startswith("peak_") and f != "peak_fp16_fp16acc")
    try:
        spec = DeviceSpec(
            name=data["name"], kind=kind, display_name=read_string(path, data, "display_name", data["name"]),
            peak_flops_per_s=peaks, memory=_memory_tiers(path, data, kind, defaults, q),
            eta_compute=si("eta_compute", defaults.eta_for(f"{kind}_compute")),
            layer_overhead_s=si("layer_overhead", defaults.overhead_for(f"{kind}_layer")),
            forward_overhead_s=si("forward_overhead", defaults.overhead_for(f"{kind}_forward")),
            tdp_w=tdp, decode_power_w=si("decode_power", tdp * defaults.power_fraction_for(f"{kind}_decode_fraction")),
            idle_power_w=si("idle_power", tdp * defaults.power_fraction_for(f"{kind}_idle_fraction")),
            price_usd_per_s=q["price_per_hour"].si if "price_per_hour" in q else None,
            host_link=read_string(path, data, "host_link", None), fpga=fabric,
            peer_link=read_string(path, data, "peer_link", None),
            cores=int(q["cores"].si) if "cores" in q else None, source=str(path),
            compute_memory_overlap=si("overlap", 1.0), multi_row_bandwidth_fraction=si("multi_row_bandwidth", 1.0),
            draft_round_overhead_s=si("draft_round_overhead", 0.0),
            verify_round_overhead_s=si("verify_round_overhead", 0.0),
            linear_row_ratios=_ratio_table(path, data, "linear_row_ratios"),
            device_class=read_string(path, data, "device_class", "") or "",
            own_engine=read_string(path, data, "engine", "") or "",
            fp16_accumulate_peak_flops_per_s=q["peak_fp16_fp16acc"].si if "peak_fp16_fp16acc" in q else None,
            mma_sync_fraction=si("mma_sync_fraction", 1.0))
    except SpecError as err:
        note = _derived_power_note(err, kind, q)
        raise (_spec_error(path, err) if not note else
               DataError(path, _SI_SUFFIX.sub("", err.field), err.value, err.allowed + note)) from None
    return HwEntry(spec, kind, path, q)


def _derived_power_note(err: SpecError, kind: str, given: dict[str, Quantity]) -> str:
    """Where a device's power complaint involves a power the entry does not state, what it was derived
    from: the TDP times a fraction of defaults.toml's [power] table (empty when every power is stated)."""
    involved = [f for f in ("decode_power", "idle_power") if f not in given and f in f"{err.field} {err.allowed}"]
    return "".join(f"; {f} = tdp x defaults.toml power.{kind}_{f.split('_')[0]}_fraction" for f in involved)


def parse_link(path: Path, data: dict, defaults: CalibrationDefaults) -> HwEntry:
    """Build a LinkSpec from one hwdb/link/NAME.toml document."""
    _check_header(path, data, "link")
    q = _quantities(path, data, "link")
    try:
        spec = LinkSpec(
            name=data["name"], display_name=read_string(path, data, "display_name", data["name"]),
            link_type=read_string(path, data, "link_type"), path=read_string(path, data, "path"),
            bandwidth_bytes_per_s=q["bandwidth"].si,
            efficiency=q["efficiency"].si if "efficiency" in q else defaults.eta_for("link"),
            latency_s=q["latency"].si, hops=int(q["hops"].si),
            software_overhead_s=q["software_overhead"].si if "software_overhead" in q else 0.0,
            energy_j_per_bit=q["energy_per_bit"].si, source=str(path),
            # unstated: a collective step is one transfer's latency, its start one software call
            collective_base_latency_s=q["collective_base_latency"].si if "collective_base_latency" in q
            else (q["software_overhead"].si if "software_overhead" in q else 0.0),
            collective_step_latency_s=q["collective_step_latency"].si if "collective_step_latency" in q
            else q["latency"].si)
    except SpecError as err:
        raise _spec_error(path, err) from None
    return HwEntry(spec, "link", path, q)


DEFAULT_KEYS = {
    "efficiency": ("gpu_compute", "gpu_bandwidth", "fpga_compute", "fpga_hbm_bandwidth", "fpga_ddr_bandwidth",
                   "fpga_sram_bandwidth", "cpu_compute", "cpu_bandwidth", "link"),
    "overhead": ("gpu_layer", "gpu_forward", "fpga_layer", "fpga_forward", "cpu_layer", "cpu_forward"),
    "power": ("gpu_decode_fraction", "fpga_decode_fraction", "cpu_decode_fraction", "gpu_idle_fraction",
              "fpga_idle_fraction", "cpu_idle_fraction"),
    "link": ("sync_per_round", "token_record_bytes"),
}
_DEFAULT_DIMENSION = {"efficiency": units.FRACTION, "overhead": units.SECONDS, "power": units.FRACTION}


def parse_defaults(path: Path, data: dict) -> tuple[CalibrationDefaults, dict[str, Quantity]]:
    """Read hwdb/defaults.toml: achieved fractions, overheads, power fractions, link constants."""
    found: dict[str, Quantity] = {}
    for section, keys in DEFAULT_KEYS.items():
        table = data.get(section, _MISSING)
        if not isinstance(table, dict):
            raise DataError(path, section, table, f"must be a table with keys {', '.join(keys)}")
        for key in keys:
            dimension = _DEFAULT_DIMENSION.get(section) or (units.SECONDS if key == "sync_per_round" else units.COUNT)
            positive = section != "overhead"
            found[f"{section}.{key}"] = parse_quantity(path, f"{section}.{key}", table.get(key, _MISSING),
                                                       dimension, positive)
            check_plausible(path, "defaults", f"{section}.{key}", found[f"{section}.{key}"])
        for key in table:
            if key not in keys:
                raise DataError(path, f"{section}.{key}", table[key], f"unknown key; allowed: {', '.join(keys)}")

    def group(section: str) -> tuple[tuple[str, float], ...]:
        return tuple((k, found[f"{section}.{k}"].si) for k in DEFAULT_KEYS[section])

    defaults = CalibrationDefaults(eta=group("efficiency"), overhead_s=group("overhead"),
                                   power_fraction=group("power"), sync_per_round_s=found["link.sync_per_round"].si,
                                   token_record_bytes=int(found["link.token_record_bytes"].si))
    return defaults, found


