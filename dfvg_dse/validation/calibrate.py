"""Calibration (issue 7): measured forward times of the reference engine and pipe times fitted to
the cost model's own parameters, with scipy; acceptance from reference traces.

A core of this machine becomes a `cpu` DeviceSpec whose fp32 peak is the nominal one and whose
achieved compute fraction, memory bandwidth, per-forward and per-layer overheads, multi-row
bandwidth fraction and compute/memory overlap are fitted by least squares on relative error to
the stage times of real decoding on that core: the verify core from the target's autoregressive
steps and tree verifications, the draft core from the drafter's rounds (so its overheads hold the
reference drafter's own per-level work: softmax, argsort, the catch-up of accepted tokens). The pipe becomes a one-hop `link` whose latency and bandwidth are a straight-line fit
of one-way time against bytes.

No fit is used unchecked (docs/validation.md, "Suspect fits"): every value that ends on a bound of
its range, and every fit with a large rms error, is a FitIssue — a `warning` when the data merely
did not determine the value, `suspect` when the fit is not a measurement of this machine (rms error
past RMS_SUSPECT, a pipe latency or bandwidth clamped into its range, a per-message overhead at 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import linregress

from dfvg_dse.acceptance.calibrate import check_round, fit_profile
from dfvg_dse.costs.processor import processor_forward_cost
from dfvg_dse.costs.stages import tree_draft_time_s, tree_verify_cost
from dfvg_dse.specs import DeviceSpec, LinkSpec, MemoryTier, ModelSpec, TreeSpec

# name, lower bound, upper bound, start
CORE_PARAMETERS = (("eta_compute", 1e-4, 1.0, 0.2), ("bandwidth_bytes_per_s", 1e8, 1e12, 2e10),
                   ("forward_overhead_s", 0.0, 1e-2, 1e-4), ("layer_overhead_s", 0.0, 1e-3, 5e-5),
                   ("multi_row_bandwidth_fraction", 0.05, 1.0, 0.7), ("compute_memory_overlap", 0.0, 1.0, 0.5),
                   ("draft_round_overhead_s", 0.0, 1e-2, 5e-5),  # only for a draft core
                   ("verify_round_overhead_s", 0.0, 1e-2, 5e-5))  # only for a verify core
# The pipe: latency 0 or 1 ms, bandwidth 1 MB/s or 1 TB/s are not pipes (healthy fits: ~9 us, ~6 GB/s).
LINK_PARAMETERS = (("latency_s", 0.0, 1e-3, 1e-5), ("bandwidth_bytes_per_s", 1e6, 1e12, 5e9))
# Ends of a range that are values of the term itself, not limits of the search: reaching them is an
# answer (overlap 0: compute and memory add; 1: the roofline's max; multi-row fraction 1: no penalty).
DEFINED_ENDS = {("compute_memory_overlap", "lower"), ("compute_memory_overlap", "upper"),
                ("multi_row_bandwidth_fraction", "upper")}
# One model per fit: only forward + n_layers x layer overhead is determined. Either alone at 0 is
# the split between them; both at 0 is a forward with no fixed cost.
SHARED_OVERHEADS = ("forward_overhead_s", "layer_overhead_s")
BOUND_TOLERANCE = 1e-3  # within 0.1% of a bound (of the bound, or of the typical value for a bound at 0): at it
# Healthy rms relative errors here: verify core 5-16%, draft core 12-31% (the higher on a loaded
# machine), pipe 5-8%; the garbage fits of issue 12 were 13,873%.
RMS_WARNING = 0.25
RMS_SUSPECT = 0.50
CORE_MEMORY_BYTES = 2 ** 30  # a core's share of memory is not what limits a tiny model: 1 GiB stated
CORE_POWER_W = 10.0  # assumption, not measured: energy is not validated on this machine


@dataclass(frozen=True)
class FitIssue:
    """A fitted value not to trust blindly: at a bound of its range, or a fit with a large rms error."""

    fit: str  # what was fitted: "local-core-0 (verify core)", "local-pipe", a profile name
    parameter: str
    value: float | None  # None where the message carries it (acceptance profiles)
    bound: float | None  # the bound reached, or the rms threshold passed
    severity: str  # "warning": reported; "suspect": reported, and validate fails on it
    message: str  # one line naming the fit, the parameter, its value and the bound

    @property
    def suspect(self) -> bool:
        return self.severity == "suspect"


@dataclass(frozen=True)
class CoreFit:
    device: DeviceSpec
    residuals: tuple[dict, ...]  # model, tokens, context, measured_s, predicted_s, relative_error
    rms_relative_error: float
    max_relative_error: float
    issues: tuple[FitIssue, ...] = ()


@dataclass(frozen=True)
class LinkFit:
    link: LinkSpec
    residuals: tuple[dict, ...]  # bytes, measured_s, predicted_s, relative_error
    rms_relative_error: float
    issues: tuple[FitIssue, ...] = ()


def _at(value: float, bound: float, typical: float) -> bool:
    return abs(value - bound) <= BOUND_TOLERANCE * max(abs(bound), abs(typical))


def bound_issue(fit: str, parameter: str, value: float, side: str, bound: float, severity: str,
                why: str) -> FitIssue:
    """A value that ended on the `side` ("lower" or "upper") bound of its range, and why that matters."""
    return FitIssue(fit, parameter, float(value), float(bound), severity,
                    f"{fit}: {parameter} = {value:.4g} at its {side} bound {bound:.4g} ({why})")


def rms_issues(fit: str, rms: float) -> list[FitIssue]:
    """A warning past RMS_WARNING, suspect past RMS_SUSPECT."""
    for limit, severity, meaning in ((RMS_SUSPECT, "suspect", "the fit does not describe the measurements"),
                                     (RMS_WARNING, "warning", "a poor fit")):
        if not rms <= limit:  # NaN too
            return [FitIssue(fit, "rms_relative_error", float(rms), limit, severity,
                             f"{fit}: rms relative error {rms:.1%} above {limit:.0%} ({meaning})")]
    return []


def core_bound_issues(fit: str, parameters, values: dict) -> list[FitIssue]:
    """Warnings for every fitted core parameter on a bound of its search range (not DEFINED_ENDS):
    the range stopped it, the measurements did not determine it."""
    why = "held there by the range: the measurements did not put it inside"
    issues = []
    for name, lower, upper, typical in parameters:
        for side, bound in (("lower", lower), ("upper", upper)):
            skip = (name, side) in DEFINED_ENDS or (side == "lower" and name in SHARED_OVERHEADS)
            if not skip and _at(values[name], bound, typical):
                issues.append(bound_issue(fit, name, values[name], side, bound, "warning", why))
    if all(_at(values[n], lower, typical) for n, lower, _, typical in parameters if n in SHARED_OVERHEADS):
        issues.append(bound_issue(fit, "forward_overhead_s + n_layers x layer_overhead_s", 0.0, "lower", 0.0,
                                  "warning", "a forward with no fixed cost; " + why))
    return issues


def core_device(name: str, peak_flops_per_s: float, values: dict, source: str,
                linear_row_ratios: tuple[float, ...] = ()) -> DeviceSpec:
    """One core as a cpu DeviceSpec with the given fitted values (CORE_PARAMETERS names) and, where
    measured, its linear layers' time per row count (then without a multi-row bandwidth fraction)."""
    return DeviceSpec(name=name, kind="cpu", peak_flops_per_s=(("fp32", peak_flops_per_s),),
                      memory=(MemoryTier("ddr", CORE_MEMORY_BYTES, values["bandwidth_bytes_per_s"], 1.0),),
                      eta_compute=values["eta_compute"], layer_overhead_s=values["layer_overhead_s"],
                      forward_overhead_s=values["forward_overhead_s"], tdp_w=CORE_POWER_W,
                      decode_power_w=CORE_POWER_W, idle_power_w=0.0, cores=1, source=source,
                      compute_memory_overlap=values["compute_memory_overlap"],
                      multi_row_bandwidth_fraction=values.get("multi_row_bandwidth_fraction", 1.0),
                      linear_row_ratios=tuple(linear_row_ratios),
                      draft_round_overhead_s=values.get("draft_round_overhead_s", 0.0),
                      verify_round_overhead_s=values.get("verify_round_overhead_s", 0.0))


def stage_records(runs: list, prompt_lengths: list[int]) -> list[dict]:
    """Timed stage operations of real decoding runs (stages.RunResult with traces), grouped by
    shape and context (in steps of 64 tokens), means (throughput is total time over tokens, so the
    occasional slow forward counts; medians ran 10-25% under the means here): target forwards of n tokens (autoregressive
    steps, tree verifications) and draft rounds (their level widths). Records: model, tokens or
    widths, context, seconds, count."""
    groups: dict[tuple, list[float]] = {}
    for run, length in zip(runs, prompt_lengths):
        for step, seconds in enumerate(run.step_s):
            groups.setdefault(("target", 1, (length + step) // 64 * 64 + 32), []).append(seconds)
        position = length
        for record in run.trace:
            tree = TreeSpec(tuple(record["parents"]), tuple(record["ranks"]))
            bucket = position // 64 * 64 + 32
            groups.setdefault(("target", tree.n_nodes, bucket), []).append(record["verify_end_s"] - record["verify_start_s"])
            widths = tree.level_widths()
            if widths:
                groups.setdefault(("draft", widths, bucket), []).append(record["draft_end_s"] - record["draft_start_s"])
            position += len(record["accepted"])
    out = []
    for (model, shape, context), values in sorted(groups.items(), key=str):
        key = "widths" if model == "draft" else "tokens"
        out.append({"model": model, key: shape, "context": context, "seconds": float(np.mean(values)),
                    "count": len(values)})
    return out


def _predict(device: DeviceSpec, spec: ModelSpec, records: list[dict]) -> np.ndarray:
    out = np.empty(len(records))
    forwards = [i for i, r in enumerate(records) if "tokens" in r]
    if forwards:
        n = np.array([records[i]["tokens"] for i in forwards], dtype=float)
        c = np.array([records[i]["context"] for i in forwards], dtype=float)
        # one token: an autoregressive step; more: a tree's verification, with the round's fixed work
        out[forwards] = np.where(n > 1, tree_verify_cost(spec, device, n - 1, None, c).time_s,
                                 processor_forward_cost(spec, device, n, c).time_s)
    for i, record in enumerate(records):
        if "widths" in record:
            out[i] = float(tree_draft_time_s(spec, device, record["widths"], record["context"])[0])
    return out


def core_parameters(drafting: bool, measured_rows: bool) -> tuple:
    """The CORE_PARAMETERS one fit determines: the draft round overhead only on a draft core, the
    verify round overhead only on a verify core, the multi-row bandwidth fraction only where the
    linear layers' row ratios were not measured."""
    return tuple(p for p in CORE_PARAMETERS
                 if (drafting or p[0] != "draft_round_overhead_s")
                 and (not drafting or p[0] != "verify_round_overhead_s")
                 and not (measured_rows and p[0] == "multi_row_bandwidth_fraction"))


def fit_core(records: list[dict], spec: ModelSpec, peak_flops_per_s: float, name: str, source: str,
             linear_row_ratios: tuple[float, ...] = ()) -> CoreFit:
    """Fit the core's parameters to one model's stage records, least squares on relative error
    weighted by how many operations each median stands for; `linear_row_ratios` (measured) held."""
    measured = np.array([r["seconds"] for r in records])
    weight = np.sqrt(np.array([r.get("count", 1) for r in records], dtype=float))
    drafting = any("widths" in r for r in records)
    parameters = core_parameters(drafting, bool(linear_row_ratios))
    names = [p[0] for p in parameters]

    def residual(x):
        device = core_device(name, peak_flops_per_s, dict(zip(names, x)), source, linear_row_ratios)
        return weight * (_predict(device, spec, records) / measured - 1.0)

    lower, upper, start = (np.array([p[i] for p in parameters]) for i in (1, 2, 3))
    scale = np.where(start > 0, start, 1.0)
    solution = least_squares(lambda z: residual(z * scale), start / scale, bounds=(lower / scale, upper / scale))
    values = dict(zip(names, solution.x * scale))
    device = core_device(name, peak_flops_per_s, values, source, linear_row_ratios)
    predicted = _predict(device, spec, records)
    errors = predicted / measured - 1.0
    rows = tuple({**{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items() if k != "seconds"},
                  "measured_s": float(m), "predicted_s": float(p), "relative_error": float(e)}
                 for r, m, p, e in zip(records, measured, predicted, errors))
    rms = float(np.sqrt(np.average(errors ** 2, weights=weight ** 2)))
    label = f"{name} ({'draft' if drafting else 'verify'} core)"
    return CoreFit(device, rows, rms, float(np.max(np.abs(errors))),
                   tuple(core_bound_issues(label, parameters, values) + rms_issues(label, rms)))


def fit_link(records: list[dict], name: str, source: str) -> LinkFit:
    """One-way seconds = latency + bytes / bandwidth, least squares over the measured sizes; a
    value outside LINK_PARAMETERS' range is held at the bound and suspect."""
    size = np.array([r["bytes"] for r in records], dtype=float)
    seconds = np.array([r["seconds"] for r in records])
    line = linregress(size, seconds)
    slope = float(line.slope)
    line_gave = {"latency_s": float(line.intercept), "bandwidth_bytes_per_s": 1.0 / slope if slope > 0 else np.inf}
    values, issues = {}, []
    for parameter, lower, upper, typical in LINK_PARAMETERS:
        raw = line_gave[parameter]
        values[parameter] = value = float(np.clip(raw, lower, upper))
        for side, bound in (("lower", lower), ("upper", upper)):
            if _at(value, bound, typical):
                fell = parameter == "bandwidth_bytes_per_s" and slope <= 0
                why = f"the straight line through the measured times gave {raw:.4g}" + \
                    ("; time fell as messages grew" if fell else "")
                issues.append(bound_issue(name, parameter, value, side, bound, "suspect", why))
    latency, bandwidth = values["latency_s"], values["bandwidth_bytes_per_s"]
    link = LinkSpec(name=name, link_type="local", path="peer-to-peer", bandwidth_bytes_per_s=bandwidth, efficiency=1.0,
                    latency_s=latency, hops=1, software_overhead_s=0.0, energy_j_per_bit=0.0, source=source)
    predicted = latency + size / bandwidth
    errors = predicted / seconds - 1.0
    rows = tuple({"bytes": int(b), "measured_s": float(m), "predicted_s": float(p), "relative_error": float(e)}
                 for b, m, p, e in zip(size, seconds, predicted, errors))
    rms = float(np.sqrt(np.mean(errors ** 2)))
    return LinkFit(link, rows, rms, tuple(issues + rms_issues(name, rms)))


def message_seconds(runs: list) -> float:
    """Mean time a message takes between the stages in sequential runs, from the traces: tree
    sent (draft end) to verification start, and verdict (verification end) to the next draft start.
    It holds encoding, the pipe, waking and decoding: the link's per-message software overhead
    once the pipe's own latency is taken off."""
    gaps = []
    for run in runs:
        trace = run.trace
        gaps += [r["verify_start_s"] - r["draft_end_s"] for r in trace]
        gaps += [b["draft_start_s"] - a["verify_end_s"] for a, b in zip(trace, trace[1:])]
    return float(np.mean(gaps)) if gaps else 0.0


def fit_acceptance(trace: list[dict], name: str, source: str):
    """An acceptance profile (rank vector, depth x rank, confidence model) from reference traces."""
    rounds = [check_round(record, line) for line, record in enumerate(trace, 1)]
    return fit_profile(rounds, name, source, bootstrap=200)


def acceptance_issues(result) -> list[FitIssue]:
    """An acceptance fit's estimates held at a bound (acceptance.FitResult.warnings), as warnings."""
    return [FitIssue(result.profile.name, "acceptance", None, None, "warning", line) for line in result.warnings]


def floored_at_zero(fit: str, parameter: str, value: float, severity: str, why: str) -> tuple[float, list[FitIssue]]:
    """max(value, 0) for a cost in seconds and, when that is 0, the issue: a cost measured as no cost."""
    if value > 0:
        return float(value), []
    return 0.0, [bound_issue(fit, parameter, 0.0, "lower", 0.0, severity, f"{why} {value * 1e6:.1f} us")]
