"""`estimate`: one design in, one record of tokens/s, J/token, stages, link and energy out."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from dfvg_dse.costs import compute_dtype_warnings
from dfvg_dse.pipeline.energy import EnergyEstimate, energy
from dfvg_dse.pipeline.schedule import expected_round, feasibility
from dfvg_dse.specs import DecodeConfig


class Estimate(NamedTuple):
    """The expected behaviour of one design. When `feasible` is false only `reason` is set."""

    name: str
    schedule: str
    feasible: bool
    reason: str
    tokens_per_s: float | None = None  # all sequences of the batch
    expected_tokens_per_round: float | None = None  # per sequence, bonus included
    round_time_s: float | None = None
    speedup_vs_ar: float | None = None
    ar_tokens_per_s: float | None = None
    hit_probability: float | None = None
    stages: dict | None = None
    link: dict | None = None
    energy: EnergyEstimate | None = None
    draft_nodes_per_round: float | None = None
    level_widths: list | None = None
    wasted_draft_fraction: float | None = None
    fill_tokens_per_round: float | None = None
    exact: bool | None = None  # false when the round shape came from Monte Carlo
    warnings: tuple[str, ...] = ()  # e.g. a stage costed at a fallback compute rate (no fp8 peak on its device)


VOCAB_PADDING = 0.01  # fraction of the target's rows two paddings of one vocabulary differ by, at most


def _dtype_warnings(config: DecodeConfig) -> tuple[str, ...]:
    """The stages whose device has no peak for their model's compute dtype (costs.compute_dtype_warnings),
    and a draft whose vocabulary is not the target's."""
    found = compute_dtype_warnings(config.target, config.system.verify)
    if config.schedule != "ar":
        found += compute_dtype_warnings(config.draft, config.system.draft)
        # embedding tables pad a shared vocabulary differently (Qwen2.5: 152,064 and 151,936 rows), so only a
        # gap past that says the tokenizers differ
        if not config.draft.head_kind and \
                abs(config.draft.vocab_size - config.target.vocab_size) > VOCAB_PADDING * config.target.vocab_size:
            found.append(f"{config.draft.name} and {config.target.name} have different vocabularies "
                         f"({config.draft.vocab_size:,} and {config.target.vocab_size:,} rows): a draft model must share "
                         "the target's tokenizer, so the acceptance given stands for a draft that does")
    return tuple(dict.fromkeys(found))


def estimate(config: DecodeConfig, baseline_ar_tokens_per_s: float | None = None, rounds: int = 20000,
             seed: int = 0) -> Estimate:
    """Expected tokens/s and energy of a design; speedups against AR on the verify device unless a
    baseline (tokens/s) is given."""
    warnings = _dtype_warnings(config)
    reason = feasibility(config, None)
    if reason:
        return Estimate(config.name, config.schedule, False, reason, warnings=warnings)
    shape, times, line = expected_round(config, rounds, seed)
    reason = feasibility(config, shape)
    if reason:
        return Estimate(config.name, config.schedule, False, reason, warnings=warnings)
    tokens_per_s = line.tokens / line.cycle_s
    if not (math.isfinite(line.cycle_s) and math.isfinite(tokens_per_s) and tokens_per_s > 0):
        # an input no finite machine has (sync_s = inf, a zero rate): never "feasible at 0 or nan tokens/s"
        return Estimate(config.name, config.schedule, False, f"a round takes {line.cycle_s:g} s for {line.tokens:g} "
                        f"tokens: not a finite rate (sync_s = {config.sync_s:g} s)", warnings=warnings)
    ar = config.batch / times.ar_step_s
    power = energy(config, times, line)
    link = None
    if config.system.link is not None and config.schedule != "ar":
        down_s, up_s = float(np.mean(times.down_s)), float(np.mean(times.up_s))
        link_s = down_s + up_s + times.sync_s
        link = {"name": config.system.link.name, "down_bytes": times.down_bytes, "up_bytes": times.up_bytes,
                "down_time_s": down_s, "up_time_s": up_s, "sync_time_s": times.sync_s,
                "time_s": link_s, "bound": times.link_bound, "share_of_round": link_s / line.cycle_s,
                "energy_j": times.link_energy_j}
    verify_s = float(np.mean(times.verify_s)) if config.schedule != "ar" else times.ar_step_s
    stages = {"verify": {"device": config.system.verify.name, "time_s": verify_s,
                         "bound": times.verify_bound if config.schedule != "ar" else times.ar_bound,
                         "busy_fraction": min(1.0, line.verify_busy_s / line.cycle_s)}}
    if config.schedule != "ar":
        stages["draft"] = {"device": config.system.draft.name, "time_s": float(np.mean(times.draft_s)),
                           "bound": times.draft_bound,
                           "busy_fraction": min(1.0, line.draft_busy_s / line.cycle_s)}
    return Estimate(
        name=config.name, schedule=config.schedule, feasible=True, reason="", tokens_per_s=tokens_per_s,
        expected_tokens_per_round=shape.expected_tokens if shape else 1.0, round_time_s=line.cycle_s,
        speedup_vs_ar=tokens_per_s / (baseline_ar_tokens_per_s or ar), ar_tokens_per_s=baseline_ar_tokens_per_s or ar,
        hit_probability=shape.hit_probability if shape else None, stages=stages, link=link, energy=power,
        draft_nodes_per_round=float(shape.widths.sum()) if shape else 0.0,
        level_widths=[float(w) for w in shape.widths] if shape else [],
        wasted_draft_fraction=line.wasted_draft_s / line.draft_busy_s if line.draft_busy_s else 0.0,
        fill_tokens_per_round=line.fill_tokens, exact=shape.exact if shape else True, warnings=warnings)
