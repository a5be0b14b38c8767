"""Records (plain dicts, JSON-ready, keys carrying units) built from specs and cost results.

Nothing here prints or reads files: the CLI formats what these functions return.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from dfvg_dse.costs import device_forward_cost, knee_tokens, memory_fit, param_counts
from dfvg_dse.specs import DeviceSpec, InputError, LinkSpec, ModelSpec


def _spec_dict(spec) -> dict:
    record = dataclasses.asdict(spec)
    if isinstance(spec, DeviceSpec):
        record["peak_flops_per_s"] = dict(spec.peak_flops_per_s)
        if spec.fpga is not None:
            record["fpga"]["peak_flops_per_s"] = spec.fpga.peak_flops_per_s
            record["fpga"]["sram_bytes"] = spec.fpga.sram_bytes
        for tier, raw in zip(spec.memory, record["memory"]):
            raw["achieved_bandwidth_bytes_per_s"] = tier.achieved_bandwidth_bytes_per_s
    if isinstance(spec, LinkSpec):
        record["achieved_bandwidth_bytes_per_s"] = spec.achieved_bandwidth_bytes_per_s
    return record


def hw_record(entry) -> dict:
    """A hardware entry (catalog HwEntry) as a dict: SI spec and the provenance of every number."""
    return {
        "name": entry.spec.name,
        "kind": entry.kind,
        "display_name": entry.spec.display_name,
        "path": str(entry.path),
        "spec": _spec_dict(entry.spec),
        "sources": {field: q._asdict() for field, q in entry.quantities.items()},
    }


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def hw_summary(entry) -> str:
    """One line of key figures for `hw list`."""
    spec = entry.spec
    if isinstance(spec, LinkSpec):
        return (f"{_si(spec.bandwidth_bytes_per_s, 'B/s')} per direction x{spec.efficiency:.2f}, "
                f"{spec.hops} hop(s) of {spec.latency_s * 1e6:.3g} us, {spec.path}")
    mem = spec.main_memory
    peak = spec.peak_for("fp16")
    return (f"{_si(peak, 'FLOP/s')} fp16, {_si(mem.bandwidth_bytes_per_s, 'B/s')} {mem.tier}, "
            f"{_si(spec.memory_capacity_bytes, 'B')}, {spec.tdp_w:.0f} W")


def model_record(entry) -> dict:
    """A model entry (catalog ModelEntry) as a dict: spec, parameter counts and provenance."""
    counts = param_counts(entry.spec)
    record = {
        "name": entry.spec.name,
        "display_name": entry.spec.display_name,
        "family": entry.spec.family,
        "path": str(entry.path),
        "source": entry.spec.source,
        "tag": entry.tag,
        "params": counts.total,
        "params_non_embedding": counts.total - counts.embedding,
        "weight_bytes": counts.total * entry.spec.weight_bytes_per_param,
        "kv_bytes_per_token": entry.spec.kv_bytes_per_token,
        "spec": dataclasses.asdict(entry.spec),
    }
    if entry.published_params is not None:
        record["published_params"] = entry.published_params._asdict()
    return record


MAX_POINTS = 100_000  # per option; the CLI prints one row per point


def parse_int_list(text: str, name: str, minimum: int) -> list[int]:
    """'1,2,4' or '1-64' or '1-64:x2' -> integers; raises InputError naming the option."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(x?)(\d+))?)?", part)
        if not match:
            raise InputError(f"{name} {text!r}: expected integers like 4, 1,2,4 or 1-64 or 1-64:x2")
        start, stop, mult, step = match.groups()
        if stop is None:
            values.append(int(start))
            continue
        value, stop_i, step_i = int(start), int(stop), int(step or 1)
        if stop_i < value or step_i < 1 or (mult and (step_i < 2 or value < 1)):
            raise InputError(f"{name} {part!r}: a range needs start <= stop and a step >= 1 (x2 or more to multiply)")
        if not mult and (stop_i - value) // step_i >= MAX_POINTS:
            raise InputError(f"{name} {part!r}: more than {MAX_POINTS:.0e} values")
        while value <= stop_i:
            values.append(value)
            value = value * step_i if mult else value + step_i
    if any(v < minimum for v in values):
        raise InputError(f"{name} {text!r}: every value must be >= {minimum}")
    if len(values) > MAX_POINTS:
        raise InputError(f"{name} {text!r}: more than {MAX_POINTS:.0e} values")
    return values


def cost_records(model: ModelSpec, device: DeviceSpec, tokens: list[int], contexts: list[int],
                 batches: list[int]) -> list[dict]:
    """Time, bound, FLOPs, bytes and memory fit of one forward for every (n, c, b) combination."""
    n, c, b = (a.ravel() for a in np.meshgrid(tokens, contexts, batches, indexing="ij"))
    cost = device_forward_cost(model, device, n, c, b)
    fit = memory_fit(model, device, c + n, b)
    peak = (device.fpga.peak_flops_per_s if device.fpga else device.peak_for(model.compute_dtype)) * device.eta_compute
    bandwidth = device.main_memory.achieved_bandwidth_bytes_per_s
    knee = knee_tokens(peak, bandwidth, model.weight_bytes_per_param)
    records = []
    for i in range(len(n)):
        record = {
            "model": model.name, "device": device.name, "device_kind": device.kind,
            "weight_dtype": model.weight_dtype, "tokens": int(n[i]), "context": int(c[i]), "batch": int(b[i]),
            "time_s": float(cost.time_s[i]), "tokens_per_s": float(n[i] * b[i] / cost.time_s[i]),
            "bound": str(cost.bound_name[i]),
            "compute_time_s": float(cost.compute_time_s[i]), "memory_time_s": float(cost.memory_time_s[i]),
            "overhead_time_s": float(cost.overhead_time_s[i]),
            "flops": float(cost.flops[i]), "bytes": float(cost.bytes[i]),
            "achieved_flops_per_s": peak, "bandwidth_bytes_per_s": bandwidth, "knee_tokens": knee,
            "memory_fit": {"fits": bool(fit.fits[i]), "required_bytes": float(fit.required_bytes[i]),
                           "capacity_bytes": fit.capacity_bytes, "weight_bytes": fit.weight_bytes,
                           "kv_cache_bytes": float(fit.kv_cache_bytes[i])},
        }
        if device.fpga is not None:
            record["passes"] = int(cost.passes[i])
            record["weights_on_chip"] = bool(cost.weights_on_chip[i])
        records.append(record)
    return records
