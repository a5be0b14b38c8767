"""Schedules: rounds per second and tokens per round for AR, sequential and overlapped decoding.

Per round (docs/pipeline.md, "Schedules"), with D draft time, V verify time, L = L_down + L_up + host sync:
- ar:          one target step per token, T_ar.
- sequential:  cycle = D + L + V (one device: D + V, no link).
- overlap:     the drafter drafts the next tree on the predicted outcome while the tree in flight is
               verified (T_v = L + V). Hit (probability h^b: every sequence of the batch must hit):
               cycle = max(D, T_v). Miss: the drafter
               hears the verdict at T_v and redrafts: cycle = T_v + D; the speculative work,
               min(D, T_v), is wasted. Renewal-reward: tokens/s = E[tokens per cycle] / E[cycle]
               (exact for this model, whatever the correlation between tokens and hits).
- gpu_fill:    (DFVG) the verifier decodes forward on its own while it waits, T_idle = E[cycle] - V,
               yielding T_idle / T_ar tokens per sequence. An upper bound: it assumes the drafter
               absorbs those tokens at no cost.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.costs import memory_fit
from dfvg_dse.pipeline.rounds import RoundShape, StageTimes, round_shape, stage_times
from dfvg_dse.specs import AdaptRule, DecodeConfig


class Timeline(NamedTuple):
    """Expected per-round quantities of a schedule (per cycle, all sequences of the batch)."""

    cycle_s: float
    tokens: float  # accepted tokens per cycle, all sequences, bonus and fill included
    draft_busy_s: float
    verify_busy_s: float
    link_busy_s: float
    wasted_draft_s: float
    fill_s: float
    fill_tokens: float


def overlap_cycle(d_next, t_v, h):
    """Overlap schedule, elementwise: (cycle, wasted draft time) for the next tree's draft time
    d_next, the verify window t_v = L + V and the hit probability h."""
    cycle = h * np.maximum(d_next, t_v) + (1.0 - h) * (t_v + d_next)
    return cycle, (1.0 - h) * np.minimum(d_next, t_v)


def timeline(config: DecodeConfig, shape: RoundShape, times: StageTimes) -> Timeline:
    """Combine stage times into one expected cycle for the config's schedule.

    Expectations run over the shape's samples (one for a static tree); in the overlap schedule the
    next tree's draft time is paired with another sample's verify window, as rounds are independent.
    """
    b = config.batch
    if config.schedule == "ar":
        return Timeline(times.ar_step_s, float(b), 0.0, times.ar_step_s, 0.0, 0.0, 0.0, 0.0)
    d, v = times.draft_s, times.verify_s
    link = times.down_s + times.up_s + times.sync_s
    tokens = b * shape.expected_tokens
    if config.schedule == "sequential":
        return Timeline(float(np.mean(d + link + v)), tokens, float(np.mean(d)), float(np.mean(v)),
                        float(np.mean(link)), 0.0, 0.0, 0.0)
    # a batched drafter's speculative tree survives only if every sequence's prediction hits
    cycles, waste = overlap_cycle(np.roll(d, 1), link + v, shape.hit_probability ** b)
    cycle, wasted = float(np.mean(cycles)), float(np.mean(waste))
    fill = max(0.0, cycle - float(np.mean(v))) if config.gpu_fill else 0.0
    fill_tokens = b * fill / times.ar_step_s
    return Timeline(cycle, tokens + fill_tokens, float(np.mean(d)) + wasted, float(np.mean(v)) + fill,
                    float(np.mean(link)), wasted, fill, fill_tokens)


def feasibility(config: DecodeConfig, shape: RoundShape | None) -> str:
    """Why a design cannot run, or '' when it can."""
    system = config.system
    if system.verify.kind == "fpga":
        return f"verify device '{system.verify.name}' is an FPGA; the target verifies on a GPU or CPU"
    if config.schedule == "overlap" and system.link is None:
        return "overlap needs two devices: draft and verify share one"
    positions = config.context + (0 if shape is None else int(shape.widths.sum()) + 1)
    same = system.draft.name == system.verify.name
    target_fit = memory_fit(config.target, system.verify, positions, config.batch)
    drafts = config.draft is not None and config.schedule != "ar"  # autoregressive decoding runs the target alone
    draft_fit = memory_fit(config.draft, system.draft, positions, config.batch, beside_target=same) if drafts else None
    need = float(target_fit.required_bytes) + (float(draft_fit.required_bytes) if draft_fit is not None and same else 0)
    if need > target_fit.capacity_bytes:
        what = "target and draft need" if same and draft_fit is not None else "target needs"
        each = " per GPU" if system.verify.parallel is not None else ""
        return (f"{what} {need / 1e9:.1f} GB{each} on '{system.verify.name}', which holds "
                f"{target_fit.capacity_bytes / 1e9:.1f} GB{each}")
    if draft_fit is not None and not same and not bool(draft_fit.fits):
        return (f"draft needs {float(draft_fit.required_bytes) / 1e9:.1f} GB on '{system.draft.name}', which holds "
                f"{draft_fit.capacity_bytes / 1e9:.1f} GB")
    fabric = system.draft.fpga
    if fabric is not None and config.schedule != "ar":
        width = config.dynamic.k_max if isinstance(config.dynamic, AdaptRule) else (
            max(config.tree.level_widths()) if config.tree is not None else
            int(np.ceil(shape.widths.max())) if shape is not None and len(shape.widths) else 0)
        if width > fabric.branch_lanes:
            return f"per-level width {width} exceeds the {fabric.branch_lanes} branch lanes of '{system.draft.name}'"
    return ""


def expected_round(config: DecodeConfig, rounds: int = 20000, seed: int = 0):
    """(shape, stage times, timeline) of a feasible config; shape is None for AR."""
    shape = None if config.schedule == "ar" else round_shape(config, rounds, seed)
    empty = RoundShape(np.zeros(0), 1.0, 0.0, True, np.zeros((1, 0)), np.ones(1))
    times = stage_times(config, shape or empty)
    return shape, times, timeline(config, shape or empty, times)
