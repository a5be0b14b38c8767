"""Designs of the search space as Optuna trials (docs/search.md).

`suggest_point` is the only place parameter names are spelled. The objective returns tokens/s per
sequence (to maximise) and the space's cost, J/token or $/Mtoken (to minimise; specs/objectives.py),
from the vectorised closed forms of pipeline/grid.py;
constraints (a level wider than the FPGA's lanes, memory that does not fit, overlap on one device)
go through Optuna's constraints mechanism, <= 0 feasible, and every trial keeps its reason.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import optuna
import pandas as pd

from dfvg_dse.pipeline.grid import (SCHEDULE_CHOICES, Grid, SearchSpace, adapt_estimate, adapt_rule, build_grid,
                                    build_shapes, evaluate_grid, evaluate_points, fpga_variant,
                                    shape_key, unpriced_reason)
from dfvg_dse.search.serving import SLO_CONSTRAINT, serve_point
from dfvg_dse.specs import DecodeConfig, SystemSpec
from dfvg_dse.specs.decoding import dynamic_reason, overlap_reason
from dfvg_dse.specs.objectives import cost_objective
from dfvg_dse.tree import greedy_tree

# Per-sequence speed, not the batch's aggregate: with an aggregate a larger batch would win both
# objectives and the front would collapse; per sequence, batch trades speed for energy or dollars.
# The objectives' columns are the space's (SearchSpace.objectives).
INFEASIBLE_VALUES = (0.0, 1e9)  # objective values reported for points that cannot be evaluated at all


class Prepared(NamedTuple):
    shapes: list
    lookup: dict  # (family, width, depth, budget) -> shape index


@lru_cache(maxsize=8)
def prepare(space: SearchSpace) -> Prepared:
    """Static tree shapes of a space, built once per process."""
    return Prepared(*build_shapes(space))


def suggest_point(trial: optuna.Trial, space: SearchSpace) -> dict:
    """One design from a trial: the only place where parameter names are spelled."""
    point = {"family": trial.suggest_categorical("family", list(space.families)),
             "depth": trial.suggest_categorical("depth", list(space.depths))}
    if point["family"] == "chain":
        point["width"] = 1
    elif point["family"] == "optimal":  # a per-level cap, or 0 for none (Sequoia's unconstrained DP tree)
        point["width"] = trial.suggest_categorical("width_cap", [*space.widths, 0])
    else:
        point["width"] = trial.suggest_categorical("width", list(space.widths))
    point["budget"] = trial.suggest_categorical("budget", list(space.budgets)) \
        if point["family"] in ("optimal", "adapt") else 0
    if point["family"] == "adapt":
        point["threshold"] = trial.suggest_categorical("threshold", list(space.thresholds))
        point["window_ratio"] = trial.suggest_categorical("window_ratio", list(space.window_ratios))
        point["temperature"] = trial.suggest_categorical("temperature", list(space.temperatures))
    point["batch"] = trial.suggest_categorical("batch", list(space.batches))
    point["draft_device"] = trial.suggest_categorical("draft_device", [d.name for d in space.draft_devices])
    point["verify_device"] = trial.suggest_categorical("verify_device", [d.name for d in space.verify_devices])
    # one device drafts and verifies in turn: only the sequential schedule exists there
    point["schedule"] = "sequential" if point["draft_device"] == point["verify_device"] else \
        trial.suggest_categorical("schedule", list(space.schedules))
    if next(d for d in space.draft_devices if d.name == point["draft_device"]).fpga is not None:
        point["fpga_pe_fraction"] = trial.suggest_categorical("fpga_pe_fraction", list(space.fpga_pe_fractions))
        point["fpga_clock_mhz"] = trial.suggest_categorical("fpga_clock_mhz", list(space.fpga_clocks_mhz))
    return point


def grid_designs(space: SearchSpace, grid: Grid) -> list[dict]:
    """The grid's points as the parameters suggest_point names (what enqueue_trial takes): the
    inverse of evaluate_point's lookup, so each design evaluates to its grid point."""
    designs = []
    for s_i, d_i, v_i, k_i, batch in zip(grid.shape_idx, grid.draft_idx, grid.verify_idx, grid.schedule_idx,
                                         grid.batch):
        shape = grid.shapes[s_i]
        width, depth, budget = (int(x) for x in shape.params[:3])
        point = {"family": shape.family, "depth": depth}
        if shape.family == "optimal":  # the DP tree is the one without a cap (its key's width is its budget)
            point["width_cap"], point["budget"] = (0 if width == budget else width), budget
        elif shape.family != "chain":
            point["width"] = width
        device, pe_fraction, clock_mhz = grid.drafts[d_i]
        base, verifier = device.name.split("@")[0], space.verify_devices[v_i].name
        point.update(batch=int(batch), draft_device=base, verify_device=verifier)
        if base != verifier:
            point["schedule"] = SCHEDULE_CHOICES[int(k_i)]
        if device.fpga is not None:
            point["fpga_pe_fraction"], point["fpga_clock_mhz"] = float(pe_fraction), float(clock_mhz)
        designs.append(point)
    return designs


ORDERED = ("depth", "width", "width_cap", "budget", "threshold", "window_ratio", "temperature", "batch",
           "fpga_pe_fraction", "fpga_clock_mhz")


def _choices(space: SearchSpace, name: str) -> tuple:
    return {"family": space.families, "depth": space.depths, "width": space.widths, "width_cap": (*space.widths, 0),
            "budget": space.budgets, "threshold": space.thresholds, "window_ratio": space.window_ratios,
            "temperature": space.temperatures,
            "schedule": space.schedules, "batch": space.batches, "fpga_pe_fraction": space.fpga_pe_fractions,
            "fpga_clock_mhz": space.fpga_clocks_mhz, "draft_device": tuple(d.name for d in space.draft_devices),
            "verify_device": tuple(d.name for d in space.verify_devices)}[name]


def neighbours(params: dict, space: SearchSpace) -> list[dict]:
    """Designs one step away: an ordered parameter one notch up or down, or another category.
    Parameters a new category needs (a width for seq, the FPGA's knobs) are left to the sampler."""
    out = []
    for name, value in params.items():
        values = list(_choices(space, name))
        if value not in values:
            continue
        i = values.index(value)
        if name in ORDERED:
            others = [values[j] for j in (i - 1, i + 1) if 0 <= j < len(values)]
        else:
            others = [v for v in values if v != value]
        for other in others:
            moved = {**params, name: other}
            if name == "family":  # drop the old family's parameters
                moved = {k: v for k, v in moved.items() if k not in ("width", "width_cap", "budget", "threshold",
                                                                     "window_ratio", "temperature")}
            if name == "draft_device":
                moved = {k: v for k, v in moved.items() if k not in ("fpga_pe_fraction", "fpga_clock_mhz",
                                                                     "schedule")}
            out.append(moved)
    return out


TABLE_AFTER_VISITS = 2  # a hardware combination asked this often is priced for every shape and schedule at once
MAX_TABLES = 256  # combinations held so (about 70 kB each on the default space)


class _Combinations(NamedTuple):
    visits: dict  # (drafter, PE share, clock, verifier, batch) -> how often it was priced point by point
    tables: dict  # the same key -> the Evaluation of every shape x schedule there


@lru_cache(maxsize=8)
def _combinations(space: SearchSpace) -> _Combinations:
    return _Combinations({}, {})


def _static_evaluation(space: SearchSpace, point: dict, drafter, verify_idx: int, index: int) -> tuple:
    """(Evaluation, position) of a static design. Pricing one point costs about as much as pricing a
    combination's every shape and schedule at once, and a search asks most combinations again and
    again: from the second visit on, a combination's table answers (issue 16)."""
    shapes, schedule = prepare(space).shapes, SCHEDULE_CHOICES.index(point["schedule"])
    held = _combinations(space)
    combo = (point["draft_device"], point.get("fpga_pe_fraction"), point.get("fpga_clock_mhz"), verify_idx,
             point["batch"])
    if combo not in held.tables:
        visits = held.visits.get(combo, 0) + 1
        if visits < TABLE_AFTER_VISITS or len(held.tables) >= MAX_TABLES:
            held.visits[combo] = visits
            return evaluate_points(space, shapes, [drafter], index, 0, verify_idx, schedule, point["batch"]), 0
        k = len(SCHEDULE_CHOICES)
        held.tables[combo] = evaluate_points(space, shapes, [drafter], np.repeat(np.arange(len(shapes)), k), 0,
                                             verify_idx, np.tile(np.arange(k), len(shapes)), point["batch"])
    return held.tables[combo], index * len(SCHEDULE_CHOICES) + schedule


def evaluate_point(space: SearchSpace, point: dict) -> dict:
    """Objectives, constraints and diagnostics of one design (a dict as suggest_point makes)."""
    drafter = next(d for d in space.draft_devices if d.name == point["draft_device"])
    if drafter.fpga is not None:
        drafter = fpga_variant(drafter, point["fpga_pe_fraction"], point["fpga_clock_mhz"])
    verify_idx = [d.name for d in space.verify_devices].index(point["verify_device"])
    verifier = space.verify_devices[verify_idx]
    if space.serving is not None:
        prepared = prepare(space)
        record = serve_point(space, point, drafter, verifier, prepared.shapes, prepared.lookup,
                             cost_objective(space.cost).needs_price)
        # a design that could not be served has no objectives: INFEASIBLE_VALUES, as any other
        return record if "tokens_per_s_per_sequence" in record else \
            _infeasible(record["reason"], record["constraints"])
    if point["family"] == "adapt":
        return _evaluate_adapt(space, point, drafter, verifier)
    prepared = prepare(space)
    shapes = prepared.shapes
    index = prepared.lookup.get(shape_key(point["family"], point["width"], point["depth"], point["budget"]))
    if index is None:
        return _infeasible("no such tree in the space (too many nodes or a duplicate shape)", (1.0, 1.0, 1.0))
    ev, at = _static_evaluation(space, point, drafter, verify_idx, index)
    record = {name: _number(value[at]) for name, value in ev._asdict().items() if name not in ("feasible", "reason")}
    record["feasible"], record["reason"] = bool(ev.feasible[at]), str(ev.reason[at])
    placement = 1.0 if any(why in record["reason"] for why in ("two devices", "no link", "no price", "draft head"))\
        else -1.0
    record["constraints"] = (record["constraint_width"], record["constraint_memory_bytes"] / 1e9, placement)
    record["parents"], record["ranks"] = list(shapes[index].parents), list(shapes[index].ranks)
    return record


def _infeasible(reason: str, constraints: tuple, **extra) -> dict:
    """The record of a design that cannot be evaluated at all: INFEASIBLE_VALUES for its objectives."""
    return {"feasible": False, "reason": reason, "tokens_per_s": INFEASIBLE_VALUES[0],
            "tokens_per_s_per_sequence": INFEASIBLE_VALUES[0], "j_per_token": INFEASIBLE_VALUES[1],
            "usd_per_mtoken": INFEASIBLE_VALUES[1], "constraints": constraints, **extra}


def _priced(space: SearchSpace, est, drafter, verifier, width_over: float) -> dict:
    """Feasibility of an evaluated ADAPT design: infeasible, its numbers kept, when dollars are the
    objective and a device has no price (as static designs are)."""
    if est.energy.usd_per_mtoken is None and cost_objective(space.cost).needs_price:
        return {"feasible": False, "reason": unpriced_reason(drafter, verifier), "constraints": (width_over, -1.0, 1.0)}
    return {"feasible": True, "reason": "", "constraints": (width_over, -1.0, -1.0)}


def _number(value) -> float | None:
    """A record's number; None for a value that has none (nan: the $/Mtoken of an unpriced device)."""
    value = float(value)
    return None if math.isnan(value) else value


def _evaluate_adapt(space: SearchSpace, point: dict, drafter, verifier) -> dict:
    """ADAPT designs go through `estimate` (Monte Carlo over sampled trees, as the simulator checks),
    not the grid's static shapes."""
    rule = adapt_rule(space, drafter, verifier, point["batch"], point["width"], point["budget"], point["threshold"],
                      point["window_ratio"], point["temperature"], point["depth"])
    link = None if drafter.name == verifier.name else space.link_for(drafter)
    if overlap_reason(space.draft) and point["schedule"] != "sequential":
        return _infeasible(overlap_reason(space.draft), (-1.0, -1.0, 1.0))
    if dynamic_reason(space.draft):
        return _infeasible(dynamic_reason(space.draft), (-1.0, -1.0, 1.0))
    if drafter.name != verifier.name and link is None:
        return _infeasible(f"no link from '{drafter.name}' to '{verifier.name}' in the space", (-1.0, -1.0, 1.0))
    config = DecodeConfig(space.target, SystemSpec(drafter, verifier, link), space.draft, space.acceptance,
                          dynamic=rule, schedule="sequential" if point["schedule"] == "sequential" else "overlap",
                          gpu_fill=point["schedule"] == "overlap-fill", batch=point["batch"], context=space.context,
                          sync_s=space.sync_s, record_bytes=space.record_bytes)
    est = adapt_estimate(config, space.adapt_rounds)
    lanes = drafter.fpga.branch_lanes if drafter.fpga is not None else float("inf")
    width_over = float(rule.k_max - lanes)
    if not est.feasible:
        memory = 1.0 if "GB" in est.reason else -1.0
        placement = 1.0 if "two devices" in est.reason else -1.0
        return _infeasible(est.reason, (width_over, memory, placement), constraint_width=width_over)
    levels = max(1, sum(1 for w in est.level_widths if w > 0.5))
    tree = greedy_tree(space.acceptance, max(1, int(round(est.draft_nodes_per_round))), levels, rule.k_max)
    return {"tokens_per_s": est.tokens_per_s, "tokens_per_s_per_sequence": est.tokens_per_s / point["batch"],
            "j_per_token": est.energy.j_per_token, "usd_per_mtoken": est.energy.usd_per_mtoken,
            "round_time_s": est.round_time_s,
            "speedup_vs_ar": est.speedup_vs_ar, "energy_efficiency_vs_ar": est.energy.energy_efficiency_vs_ar,
            "expected_tokens_per_round": est.expected_tokens_per_round,
            "draft_time_s": est.stages["draft"]["time_s"], "verify_time_s": est.stages["verify"]["time_s"],
            "link_time_s": est.link["time_s"] if est.link else 0.0, "min_depth": rule.min_depth,
            "constraint_width": width_over, **_priced(space, est, drafter, verifier, width_over),
            # its expected shape as a static tree, for exports to engines that take one
            "parents": list(tree.parents), "ranks": list(tree.ranks)}


# placement: overlap on one device, no link, or (for $/Mtoken) a device without a price
CONSTRAINT_NAMES = ("width_over_lanes", "memory_over_capacity_gb", "placement")


def constraint_names(space: SearchSpace) -> tuple[str, ...]:
    """The constraints of a space's trials: the SLO shortfall too when designs are served under load."""
    return CONSTRAINT_NAMES + ((SLO_CONSTRAINT,) if space.serving is not None else ())


def objective_values(space: SearchSpace, record: dict) -> tuple[float, float]:
    """The two objectives of a record, as the sampler takes them: a design without a value (no
    price, nothing evaluated) reports INFEASIBLE_VALUES, never nan."""
    values = tuple(record.get(name) for name in space.objectives)
    return tuple(float(v) if v is not None and math.isfinite(v) else bad for v, bad in zip(values, INFEASIBLE_VALUES))


def make_objective(space: SearchSpace):
    """The trial function. A design asked again (a sampler revisits about half its designs by 20,000
    trials on the default space) is priced once: its record is kept, keyed by the design."""
    priced: dict[tuple, tuple] = {}

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        point = suggest_point(trial, space)
        key = tuple(sorted(point.items()))
        if key not in priced:
            record = {**point, **evaluate_point(space, point)}  # the full design, derived values included
            constraints = record.pop("constraints")
            priced[key] = (constraints, json.dumps(record), objective_values(space, record))
        constraints, text, values = priced[key]
        names = constraint_names(space)
        constraints = (*constraints, *(-1.0,) * (len(names) - len(constraints)))  # a record without the SLO's
        for name, value in zip(names, constraints):
            trial.set_constraint(name, value)  # feasible when every value is <= 0
        trial.set_user_attr("record", text)  # one write per trial, not one per field
        return values
    return objective


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per finished trial: parameters, objectives, feasibility and reason."""
    rows = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        record = json.loads(t.user_attrs.get("record", "{}"))
        rows.append({"trial": t.number, **t.params, **record})
    frame = pd.DataFrame(rows)
    return frame


def sweep_frame(space: SearchSpace) -> pd.DataFrame:
    """The exhaustive grid of the space, evaluated vectorised: one row per point (static trees;
    ADAPT needs a Monte Carlo run per point and is left to the search)."""
    prepared = prepare(space)
    grid = build_grid(space, prepared.shapes)
    drafts = grid.drafts
    ev = evaluate_grid(space, grid)
    shapes = prepared.shapes
    frame = pd.DataFrame({
        "family": [shapes[i].family for i in range(len(shapes))],
        "width": [shapes[i].params[0] for i in range(len(shapes))],
        "depth": [shapes[i].params[1] for i in range(len(shapes))],
        "budget": [shapes[i].params[2] for i in range(len(shapes))],
    }).iloc[grid.shape_idx].reset_index(drop=True)
    frame["schedule"] = np.asarray(SCHEDULE_CHOICES)[grid.schedule_idx]
    frame["batch"] = grid.batch
    frame["draft_device"] = [drafts[i][0].name.split("@")[0] for i in grid.draft_idx]
    frame["fpga_pe_fraction"] = [drafts[i][1] for i in grid.draft_idx]
    frame["fpga_clock_mhz"] = [drafts[i][2] for i in grid.draft_idx]
    frame["verify_device"] = [space.verify_devices[i].name for i in grid.verify_idx]
    for name, value in ev._asdict().items():
        frame[name] = value
    return frame
