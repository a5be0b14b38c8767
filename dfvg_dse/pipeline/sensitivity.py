"""Sensitivity sweeps the DFVG paper lacks: speedup against link latency, acceptance, target size
and batch, for the heterogeneous design and the single-device alternatives, with the point where
the split stops paying (the FPGA design no faster than the best single-GPU design)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from dfvg_dse.pipeline.scenarios import Setup, scenario
from dfvg_dse.specs import AcceptanceProfile, ConfidenceModel

SWEPT = ("dfvg", "amusd", "specinfer", "sps")
VARIES = ("link-latency", "acceptance", "target", "batch")


class Sweep(NamedTuple):
    vary: str
    x_label: str
    x: list  # values (numbers or model names)
    speedup: dict  # scenario -> list of speedups (None where infeasible)
    tokens_per_s: dict
    crossover: str  # where dfvg stops beating the best single-GPU scenario, or a sentence saying it never does
    infeasible: dict  # value (as printed) -> why dfvg cannot run there (a target that does not fit, ...)
    warnings: list  # what the estimates warned of (a stage costed at a fallback compute rate), once each


def acceptance_profile(base: AcceptanceProfile, p1: float) -> AcceptanceProfile:
    """The base profile's shape with top-1 acceptance p1 (tail rescaled to 1 - p1, calibrated confidences)."""
    tail = [x / max(1e-12, 1.0 - base.rank_probs[0]) for x in base.rank_probs[1:]]
    confidence = None
    if base.confidence is not None:
        confidence = dataclasses.replace(base.confidence, top1_mean=(p1,), calibration_q=(), calibration_accept=())
    else:
        confidence = ConfidenceModel((p1,), 4.0, tuple(tail))
    return AcceptanceProfile(f"{base.name} p1={p1:g}", (p1,) + tuple((1 - p1) * t for t in tail),
                             confidence=confidence, source=f"{base.source}; p_1 set to {p1:g}")


def sweep(setup: Setup, vary: str, values: list, models: dict | None = None, rounds: int = 4000) -> Sweep:
    """Speedups of SWEPT scenarios as one factor varies (targets by name from `models`)."""
    speed = {s: [] for s in SWEPT}
    rate = {s: [] for s in SWEPT}
    infeasible = {}
    warnings: dict[str, None] = {}  # ordered, each once
    label = {"link-latency": "link latency per hop (us)", "acceptance": "top-1 acceptance p_1",
             "target": "target model", "batch": "batch size"}[vary]
    for value in values:
        if vary == "link-latency":
            link = dataclasses.replace(setup.fpga_link, latency_s=value * 1e-6)
            varied = dataclasses.replace(setup, fpga_link=link, cpu_link=link, gpu_link=dataclasses.replace(
                setup.gpu_link, latency_s=value * 1e-6))
        elif vary == "acceptance":
            varied = dataclasses.replace(setup, acceptance=acceptance_profile(setup.acceptance, value))
        elif vary == "target":
            varied = dataclasses.replace(setup, target=models[value])
        else:
            varied = dataclasses.replace(setup, batch=int(value))
        ar = scenario(varied, "ar", None, rounds)
        for name in SWEPT:
            est = scenario(varied, name, ar.tokens_per_s if ar.feasible else None, rounds)
            speed[name].append(est.speedup_vs_ar if est.feasible else None)
            rate[name].append(est.tokens_per_s if est.feasible else None)
            warnings.update(dict.fromkeys(est.warnings))
            if name == "dfvg" and not est.feasible:
                infeasible[_label(value)] = est.reason
    return Sweep(vary, label, list(values), speed, rate, _crossover(values, speed), infeasible, list(warnings))


def _label(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _crossover(values: list, speed: dict) -> str:
    """Where the FPGA design beats the best feasible single-GPU design (specinfer, sps, else AR); values where
    the FPGA design cannot run at all are named apart, never counted as 'does not pay'."""
    wins, losses, cannot = [], [], []
    for value, dfvg, spec, sps in zip(values, speed["dfvg"], speed["specinfer"], speed["sps"]):
        single = max([x for x in (spec, sps) if x is not None], default=1.0)  # else AR itself
        (cannot if dfvg is None else wins if dfvg > single else losses).append(_label(value))
    tail = f"; infeasible at {', '.join(cannot)}" if cannot else ""
    if not wins and not losses:
        return f"the FPGA split is infeasible over the whole range ({', '.join(cannot)})"
    if not losses:
        return f"the FPGA split beats the best single-GPU design wherever it runs{tail}" if cannot else \
            "the FPGA split beats the best single-GPU design over the whole range"
    if not wins:
        return f"the FPGA split never beats the best single-GPU design here{tail}"
    return f"the FPGA split pays at {', '.join(wins)}; not at {', '.join(losses)}{tail}"
