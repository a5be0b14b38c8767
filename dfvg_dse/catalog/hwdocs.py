"""hwdb documents for calibrated local hardware (issue 7): a core of this machine as a `cpu`
entry and the pipe between two stage processes as a `link` entry, every number tagged `measured`
(or `assumed`) with the command, date and fit residual as its source. The catalog writes them
atomically and reads them back with the same parser as the shipped hwdb."""

from __future__ import annotations

from dfvg_dse.specs import DeviceSpec, LinkSpec


def _q(value: float, unit: str, tag: str, source: str) -> dict:
    return {"value": float(value), "unit": unit, "tag": tag, "source": source}


def core_document(device: DeviceSpec, clock_hz: float, peak_source: str, fit_source: str, host: str) -> dict:
    """A cpu entry for one calibrated core; `fit_source` names the command, date and residuals."""
    fit = f"fitted by scipy least squares to reference-engine forward times: {fit_source}"
    assumed = "assumption: one core; not measured, energy is not validated on this machine"
    memory = device.main_memory
    rows = ("weight streaming scaled by linear_row_ratios[n - 1] for a forward of n rows" if device.linear_row_ratios
            else "memory at multi_row_bandwidth x bandwidth when a forward has 2+ rows")
    doc = {
        "name": device.name, "kind": "cpu", "display_name": f"{host}, one core (calibrated)",
        "notes": "Written by `dfvg-dse calibrate`. Forward time = overheads + max(compute, memory) + "
                 f"(1 - overlap) x min(compute, memory); {rows}.",
        "cores": _q(1, "count", "measured", "one pinned process per stage"),
        "clock": _q(clock_hz / 1e9, "GHz", "measured", peak_source),
        "peak_fp32": _q(device.peak_for("fp32") / 1e9, "GFLOPS", "derived", peak_source),
        "eta_compute": _q(device.eta_compute, "fraction", "measured", fit),
        "forward_overhead": _q(device.forward_overhead_s * 1e6, "us", "measured", fit),
        "layer_overhead": _q(device.layer_overhead_s * 1e6, "us", "measured", fit),
        "multi_row_bandwidth": _q(device.multi_row_bandwidth_fraction, "fraction", "measured", fit),
        "overlap": _q(device.compute_memory_overlap, "fraction", "measured", fit),
        "draft_round_overhead": _q(device.draft_round_overhead_s * 1e6, "us", "measured", fit),
        "verify_round_overhead": _q(device.verify_round_overhead_s * 1e6, "us", "measured", fit),
        "tdp": _q(device.tdp_w, "W", "unverified", assumed),
        "memory": [{"tier": "ddr", "capacity": _q(memory.capacity_bytes / 2 ** 30, "GiB", "unverified",
                                                  "a core's share; a tiny model never fills it"),
                    "bandwidth": _q(memory.bandwidth_bytes_per_s / 1e9, "GB/s", "measured", fit),
                    "efficiency": _q(1.0, "fraction", "measured", "the fitted bandwidth is the achieved one")}],
    }
    if device.linear_row_ratios:
        doc["linear_row_ratios"] = {
            "values": list(device.linear_row_ratios), "tag": "measured",
            "source": "median time of the model's linear layers (the reference engine's own products) over 1, 2, ... "
                      "rows on this core over one row's, single-threaded: dfvg-dse calibrate"}
    return doc


def link_document(link: LinkSpec, fit_source: str) -> dict:
    """A link entry for the measured pipe between the two stage processes."""
    fit = f"straight-line fit of one-way time against bytes: {fit_source}"
    return {
        "name": link.name, "kind": "link", "display_name": "pipe between two local stage processes (calibrated)",
        "notes": "Written by `dfvg-dse calibrate`: the floor under every emulated link of `reference generate --link`.",
        "link_type": "local", "path": "peer-to-peer",
        "bandwidth": _q(link.bandwidth_bytes_per_s / 1e9, "GB/s", "measured", fit),
        "efficiency": _q(1.0, "fraction", "measured", "the fitted bandwidth is the achieved one"),
        "latency": _q(link.latency_s * 1e6, "us", "measured", fit),
        "hops": _q(1, "count", "derived", "one pipe"),
        "software_overhead": _q(link.software_overhead_s * 1e6, "us", "measured",
                                "median per-message gap between the stages in sequential calibration runs, "
                                "less the pipe's latency: encoding, waking, decoding"),
        "energy_per_bit": _q(0.0, "pJ/bit", "unverified", "not measured"),
    }


def torch_device_document(name: str, kind: str, display: str, peak_flops_per_s: float, peak_dtype: str,
                          bandwidth_bytes_per_s: float, capacity_bytes: float, cores: int, source: str,
                          engine: str = "") -> dict:
    """A gpu or cpu entry for a device measured by `calibrate --torch-device`: the matmul peak and
    the copy bandwidth as measured (efficiency 1: the fitted engine profile holds what a forward
    reaches of them); `engine` names that profile. Power is not measured: an assumption, said so."""
    peak_key = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}[peak_dtype]
    assumed = "assumption: not measured by calibrate --torch-device; energy is not validated for this device"
    doc = {"name": name, "kind": kind, "display_name": display,
           "notes": "Written by `dfvg-dse calibrate --torch-device`; forwards are priced by the engine profile named "
                    "below, fitted to this device's own whole-model forwards (docs/engines.md).",
           f"peak_{peak_key}": _q(peak_flops_per_s / 1e12, "TFLOPS", "measured", source),
           "tdp": _q(300.0 if kind == "gpu" else 200.0, "W", "unverified", assumed),
           "memory": [{"tier": "hbm" if kind == "gpu" else "ddr",
                       "capacity": _q(capacity_bytes / 2 ** 30, "GiB", "measured", source),
                       "bandwidth": _q(bandwidth_bytes_per_s / 1e9, "GB/s", "measured", source),
                       "efficiency": _q(1.0, "fraction", "measured", "the measured copy bandwidth is the achieved one")}]}
    if peak_key != "fp16" and kind == "gpu":  # a gpu entry needs peak_fp16: the measured dtype's peak stands in
        doc["peak_fp16"] = _q(peak_flops_per_s / 1e12, "TFLOPS", "measured", f"{source} (measured in {peak_dtype})")
    if kind == "cpu":
        doc["cores"] = _q(cores, "count", "measured", "os.cpu_count()")
        doc["clock"] = _q(1.0, "GHz", "unverified", "not measured: the peak above is the measured matmul rate")
        if peak_key != "fp32":
            doc["peak_fp32"] = _q(peak_flops_per_s / 1e12, "TFLOPS", "measured", f"{source} (measured in {peak_dtype})")
    if engine:
        doc["engine"] = engine
    return doc
