"""The design space and its vectorised evaluation (docs/search.md, "The space").

A `SearchSpace` lists the choices: tree family (chain, seq, kary, optimal, adapt), width, depth,
budget, ADAPT's threshold and window ratio, schedule, batch, and the hardware: draft device,
verify device, the FPGA's share of PE DSPs and its clock. Points are evaluated with the closed
forms of pipeline/ (the same `overlap_cycle` and `device_energy_j`), vectorised over every
tree shape and schedule for each (draft device, verify device, batch) combination, so a grid of
1e5 points takes seconds and a single Optuna trial a millisecond.

Tree shapes are built once per space: static families exactly, ADAPT by Monte Carlo (cached by
rule). Infeasible points are kept with a reason: memory that does not fit, a width above the
FPGA's lanes, overlap on one device.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from dfvg_dse.costs import (device_forward_cost, link_time, memory_fit, processor_forward_cost, tree_draft_time_s,
                            tree_verify_cost)
from dfvg_dse.costs.stages import round_link_bytes
from dfvg_dse.pipeline.energy import device_energy_j, devices_price_usd_per_s, usd_per_mtoken
from dfvg_dse.pipeline.pareto import pareto_mask
from dfvg_dse.pipeline.estimate import estimate
from dfvg_dse.pipeline.rounds import static_tokens_and_hit
from dfvg_dse.pipeline.schedule import overlap_cycle
from dfvg_dse.specs import (AcceptanceProfile, AdaptRule, DecodeConfig, DeviceSpec, InputError, LinkSpec, ModelSpec,
                            SystemSpec, TreeSpec)
from dfvg_dse.specs.decoding import LOOKUP_CHAIN, LOOKUP_HOST, overlap_reason
from dfvg_dse.specs.objectives import COSTS, DEFAULT_COST, SPEED, cost_objective
from dfvg_dse.tree import check_sequoia, chain, dp_tree, greedy_tree, kary, sequences, sequoia_dp

FAMILIES = ("chain", "seq", "kary", "optimal", "adapt")
SCHEDULE_CHOICES = ("sequential", "overlap", "overlap-fill")
MAX_SHAPE_NODES = 256


@dataclass(frozen=True)
class SearchSpace:
    """Everything a search or a sweep explores, and the fixed context it runs in."""

    target: ModelSpec
    draft: ModelSpec
    acceptance: AcceptanceProfile
    verify_devices: tuple[DeviceSpec, ...]
    draft_devices: tuple[DeviceSpec, ...]
    links: tuple[tuple[str, LinkSpec], ...]  # draft device name -> link to the verifier
    families: tuple[str, ...] = ("chain", "seq", "kary", "optimal")
    widths: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    depths: tuple[int, ...] = tuple(range(1, 13))
    budgets: tuple[int, ...] = (8, 16, 32, 64)
    thresholds: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2)  # adapt: tau
    window_ratios: tuple[float, ...] = (0.5, 1.0, 1.5)  # adapt: D_min = ceil(ratio x T_verify / T_draft_step)
    temperatures: tuple[float, ...] = (0.0,)  # adapt: Gumbel top-k temperature T
    schedules: tuple[str, ...] = SCHEDULE_CHOICES
    batches: tuple[int, ...] = (1, 2, 4, 8)
    fpga_pe_fractions: tuple[float, ...] = (0.5, 0.75, 1.0)  # a quarter-size engine never made a front here
    # 300 MHz: DFVG; 250 MHz: toward the 225 MHz HBM HLS designs reach (FlightLLM profile/config.yaml)
    fpga_clocks_mhz: tuple[float, ...] = (250.0, 300.0)
    context: int = 512
    sync_s: float = 0.0
    record_bytes: int = 16  # per draft token over the link (hwdb/defaults.toml token_record_bytes)
    adapt_rounds: int = 1000
    name: str = "default"
    cost: str = DEFAULT_COST  # the minimised objective (specs/objectives.py): j_per_token or usd_per_mtoken
    serving: object = None  # specs.serving.ServingSetup: designs served under this load (search/serving.py)

    def __post_init__(self) -> None:
        if not isinstance(self.cost, str) or self.cost not in COSTS:
            raise InputError(f"cost objective {str(self.cost)[:40]!r}: allowed: {', '.join(COSTS)}")
        if "optimal" in self.families:  # the grid runs Sequoia's DP at the largest budget, every depth
            check_sequoia(self.acceptance, max(self.budgets), max(self.depths))

    def link_for(self, draft: DeviceSpec) -> LinkSpec | None:
        """The link from a drafter (or one of its FPGA variants) to the verifier; None if the space has none."""
        return dict(self.links).get(draft.name.split("@")[0])

    @property
    def objectives(self) -> tuple[str, str]:
        """The columns of the two objectives: speed per sequence (maximised), the cost (minimised)."""
        return SPEED, self.cost


class Shape(NamedTuple):
    family: str
    params: tuple  # (width, depth, budget, threshold, window_ratio) as used
    widths: np.ndarray  # draft nodes per level (padded to the space's max depth)
    expected_tokens: float
    pairs: float
    hit: float
    max_width: int
    parents: tuple | None  # static trees only
    ranks: tuple | None
    rule: AdaptRule | None


def fpga_variant(device: DeviceSpec, pe_fraction: float, clock_mhz: float) -> DeviceSpec:
    """An FPGA with a share of its PE DSPs and branch lanes, at another clock (a design choice)."""
    f = device.fpga
    pe = max(1, int(round(f.pe_dsp_count * pe_fraction)))
    lanes = max(1, int(round(f.branch_lanes * pe_fraction)))
    fabric = dataclasses.replace(f, pe_dsp_count=pe, branch_lanes=lanes, clock_hz=clock_mhz * 1e6)
    scale = fabric.peak_flops_per_s / f.peak_flops_per_s
    # Dynamic power follows the active PEs and the clock; the static part stays (assumed linear).
    power = device.idle_power_w + (device.decode_power_w - device.idle_power_w) * scale
    return dataclasses.replace(device, name=f"{device.name}@{pe_fraction:g}x{clock_mhz:g}MHz", fpga=fabric,
                               peak_flops_per_s=tuple((d, p * scale) for d, p in device.peak_flops_per_s),
                               decode_power_w=power)


def draft_variants(space: SearchSpace) -> list[tuple[DeviceSpec, float, float]]:
    """(device, PE fraction, clock MHz) for every drafter; non-FPGA devices have one variant."""
    out = []
    for device in space.draft_devices:
        if device.fpga is None:
            out.append((device, 1.0, 0.0))
        else:
            out += [(fpga_variant(device, p, c), p, c) for p in space.fpga_pe_fractions for c in space.fpga_clocks_mhz]
    return out


def _static_shape(family: str, params: tuple, tree, profile, depth_cap: int) -> Shape:
    widths = np.zeros(depth_cap)
    level = tree.level_widths()
    widths[:len(level)] = level
    tokens, hit = static_tokens_and_hit(tree, profile)
    return Shape(family, params, widths, tokens, float(sum(d + 1 for d in tree.depths)), hit, max(level),
                 tree.parents, tree.ranks, None)


def shape_key(family: str, width: int, depth: int, budget: int) -> tuple:
    """The key a point uses to find its tree: one sequence or a 1-ary tree is a chain, and an
    optimal tree's width cap at or above its budget does not bind."""
    if family in ("seq", "kary") and width == 1:
        family = "chain"
    if family == "optimal":
        width = budget if width == 0 else min(width, budget)  # 0: no cap
    return (family, 1 if family == "chain" else width, depth, budget if family == "optimal" else 0)


def build_shapes(space: SearchSpace) -> tuple[list[Shape], dict]:
    """Every static tree shape of the space (deduplicated) and the index of every key's tree."""
    cap, profile = max(space.depths), space.acceptance
    shapes, index, lookup = [], {}, {}

    def add(key: tuple, family: str, params: tuple, tree) -> None:
        tree_key = (tree.parents, tree.ranks)
        if tree_key not in index:
            index[tree_key] = len(shapes)
            shapes.append(_static_shape(family, params, tree, profile, cap))
        lookup.setdefault(key, index[tree_key])

    for d in space.depths:
        if "chain" in space.families:
            add(shape_key("chain", 1, d, 0), "chain", (1, d, d, 0.0, 0.0), chain(d))
        for w in space.widths:
            if "seq" in space.families and w >= 2 and w * d <= MAX_SHAPE_NODES:
                add(shape_key("seq", w, d, 0), "seq", (w, d, w * d, 0.0, 0.0), sequences(w, d))
            nodes = sum(w ** i for i in range(1, d + 1))
            if "kary" in space.families and w >= 2 and nodes <= MAX_SHAPE_NODES:
                add(shape_key("kary", w, d, 0), "kary", (w, d, nodes, 0.0, 0.0), kary(w, d))
        if "optimal" in space.families:
            table = sequoia_dp(profile, max(space.budgets), d)
            for b in space.budgets:
                if np.isfinite(table.best[b + 1]):
                    add(shape_key("optimal", b, d, b), "optimal", (b, d, b, 0.0, 0.0), dp_tree(table, b + 1))
                for w in space.widths:
                    if w < b:
                        add(shape_key("optimal", w, d, b), "optimal", (w, d, b, 0.0, 0.0),
                            greedy_tree(profile, b, d, w))
    return shapes, lookup


class Evaluation(NamedTuple):
    """Objectives and diagnostics for an array of points (one entry per point)."""

    tokens_per_s: np.ndarray  # all sequences of the batch
    tokens_per_s_per_sequence: np.ndarray  # what one user sees: the search's first objective
    j_per_token: np.ndarray
    usd_per_mtoken: np.ndarray  # nan where a device has no price per hour
    round_time_s: np.ndarray
    speedup_vs_ar: np.ndarray
    energy_efficiency_vs_ar: np.ndarray
    expected_tokens_per_round: np.ndarray
    draft_time_s: np.ndarray
    verify_time_s: np.ndarray
    link_time_s: np.ndarray
    feasible: np.ndarray
    reason: np.ndarray  # '' where feasible
    constraint_width: np.ndarray  # max level width - lanes (<= 0 is feasible)
    constraint_memory_bytes: np.ndarray  # required - capacity (<= 0 is feasible)


def evaluate_points(space: SearchSpace, shapes: list[Shape], drafts: list[DeviceSpec], shape_idx, draft_idx,
                    verify_idx, schedule_idx, batch) -> Evaluation:
    """Closed-form objectives of many points at once (indices into shapes, drafts, space.verify_devices,
    SCHEDULE_CHOICES); vectorised within each (draft, verify, batch) combination."""
    arrays = (np.atleast_1d(np.asarray(a)) for a in (shape_idx, draft_idx, verify_idx, schedule_idx, batch))
    shape_idx, draft_idx, verify_idx, schedule_idx, batch = np.broadcast_arrays(*arrays)  # a scalar: every point
    n = len(shape_idx)
    out = {name: np.full(n, np.nan) for name in Evaluation._fields if name not in ("feasible", "reason")}
    feasible, reason = np.ones(n, dtype=bool), np.full(n, "", dtype=object)
    widths_all = np.stack([s.widths for s in shapes])
    f_all = np.array([s.expected_tokens for s in shapes])
    pairs_all = np.array([s.pairs for s in shapes])
    hit_all = np.array([s.hit for s in shapes])
    maxw_all = np.array([s.max_width for s in shapes])
    combos, group = np.unique(np.stack([draft_idx, verify_idx, batch], axis=1), axis=0, return_inverse=True)
    group = group.ravel()
    order = np.argsort(group, kind="stable")  # the points of each combination, in their order
    bounds = np.searchsorted(group[order], np.arange(len(combos) + 1))
    for g, (d_i, v_i, b) in enumerate(combos):
        m = order[bounds[g]:bounds[g + 1]]
        drafter, verifier, b = drafts[d_i], space.verify_devices[v_i], int(b)
        same = drafter.name == verifier.name
        s, k = shape_idx[m], schedule_idx[m]
        widths, f, pairs, h = widths_all[s], f_all[s], pairs_all[s], hit_all[s]
        nodes = widths.sum(axis=1)
        d = tree_draft_time_s(space.draft, drafter, widths, space.context, b, f)[0]
        v = tree_verify_cost(space.target, verifier, nodes, pairs, space.context, b).time_s
        t_ar = float(processor_forward_cost(space.target, verifier, 1, space.context, b).time_s)
        link = None if same else space.link_for(drafter)
        if link is None:
            link_s, link_j = np.zeros(len(m)), np.zeros(len(m))
        else:
            down_bytes, up_bytes = round_link_bytes(nodes, f, space.record_bytes, b, 0,
                                                    space.draft.feature_bytes_per_token)
            down, up = link_time(link, down_bytes), link_time(link, up_bytes)
            link_s = down.time_s + up.time_s + (space.sync_s if link.path == "host-staged" else 0.0)
            link_j = down.energy_j + up.energy_j
        seq = d + link_s + v
        over, wasted = overlap_cycle(d, link_s + v, h ** b)  # every sequence of the batch must hit
        cycle = np.where(k == 0, seq, over)
        fill = np.where(k == 2, np.maximum(0.0, cycle - v), 0.0)
        tokens = b * f + b * fill / t_ar
        draft_busy, verify_busy = d + np.where(k == 0, 0.0, wasted), v + fill
        if same:
            energy = device_energy_j(verifier.decode_power_w, verifier.idle_power_w,
                                     np.minimum(cycle, draft_busy + verify_busy), cycle)
        else:
            energy = (device_energy_j(drafter.decode_power_w, drafter.idle_power_w, draft_busy, cycle)
                      + device_energy_j(verifier.decode_power_w, verifier.idle_power_w, verify_busy, cycle))
        j_per_token = (energy + link_j) / tokens
        ar_j = verifier.decode_power_w * t_ar / b
        # constraints: widths within the FPGA's lanes; target (+ draft on one device) within memory
        lanes = drafter.fpga.branch_lanes if drafter.fpga is not None else np.inf
        c_width = maxw_all[s] - lanes
        positions = space.context + nodes + 1
        target_fit = memory_fit(space.target, verifier, positions, b)  # per device of a group
        need = target_fit.required_bytes
        if same:
            need = need + memory_fit(space.draft, verifier, positions, b, beside_target=True).required_bytes
        c_mem = need - target_fit.capacity_bytes
        if not same:
            draft_fit = memory_fit(space.draft, drafter, positions, b)
            c_mem = np.maximum(c_mem, draft_fit.required_bytes - draft_fit.capacity_bytes)
        price = devices_price_usd_per_s([verifier] if same else [drafter, verifier])
        values = dict(tokens_per_s=tokens / cycle, tokens_per_s_per_sequence=tokens / cycle / b,
                      j_per_token=j_per_token, round_time_s=cycle,
                      usd_per_mtoken=usd_per_mtoken(price, tokens / cycle) if price is not None else np.nan,
                      speedup_vs_ar=(tokens / cycle) / (b / t_ar), energy_efficiency_vs_ar=ar_j / j_per_token,
                      expected_tokens_per_round=f, draft_time_s=d, verify_time_s=v, link_time_s=link_s,
                      constraint_width=c_width, constraint_memory_bytes=c_mem)
        for name, value in values.items():
            out[name][m] = value
        why = np.full(len(m), "", dtype=object)
        if price is None and cost_objective(space.cost).needs_price:
            why[:] = unpriced_reason(drafter, verifier)
        why = np.where(c_mem > 0, f"model and KV cache do not fit '{verifier.name}' / '{drafter.name}'", why)
        why = np.where(c_width > 0, f"a level is wider than the {lanes} lanes of '{drafter.name}'", why)
        why = np.where((k > 0) & same, "overlap needs two devices", why)
        if overlap_reason(space.draft):
            why = np.where(k > 0, overlap_reason(space.draft), why)
        if space.draft.drafts_by_lookup:  # one continuation a round, on the verifier's host
            why = np.where(widths.max(axis=1) > 1, LOOKUP_CHAIN, why)
            if not same:
                why[:] = LOOKUP_HOST
        if space.draft.max_draft_depth:  # Medusa: one position per head
            levels = (widths > 0).sum(axis=1)
            why = np.where(levels > space.draft.max_draft_depth,
                           f"deeper than the {space.draft.max_draft_depth} positions {space.draft.name} drafts", why)
        if not same and link is None:
            why[:] = f"no link from '{drafter.name}' to '{verifier.name}' in the space"
        reason[m] = why
        feasible[m] = why == ""
    return Evaluation(**out, feasible=feasible, reason=reason)


def unpriced_reason(drafter: DeviceSpec, verifier: DeviceSpec) -> str:
    """Why a design has no $/Mtoken: the devices without a price per hour, and how to give one."""
    names = dict.fromkeys(d.name.split("@")[0] for d in (drafter, verifier) if d.price_usd_per_s is None)
    return (f"no price per hour for {' and '.join(repr(n) for n in names)}: give price_per_hour "
            "in a hwdb overlay (docs/data-format.md) to price it")


def unpriced_devices(space: SearchSpace) -> tuple[list[str], bool]:
    """The space's devices without a price per hour (drafters, then verifiers, each once), and whether
    any (drafter, verifier) pair of it is priced."""
    devices = (*space.draft_devices, *space.verify_devices)
    names = list(dict.fromkeys(d.name for d in devices if d.price_usd_per_s is None))
    pairs = any(v.price_usd_per_s is not None and (d.name == v.name or d.price_usd_per_s is not None)
                for d in space.draft_devices for v in space.verify_devices)
    return names, pairs


class Grid(NamedTuple):
    """Every point of a space's grid, as index arrays, with the tables the indices point into."""

    shapes: list
    drafts: list  # (device, pe fraction, clock MHz)
    shape_idx: np.ndarray
    draft_idx: np.ndarray
    verify_idx: np.ndarray
    schedule_idx: np.ndarray
    batch: np.ndarray


def _dims(space: SearchSpace, shapes: list, drafts: list) -> tuple[int, ...]:
    """The grid's axes before same-device points off the sequential schedule are dropped: shapes,
    drafter variants, verifiers, schedules, batches (C order: batch varies fastest)."""
    return (len(shapes), len(drafts), len(space.verify_devices), len(space.schedules), len(space.batches))


def grid_points(space: SearchSpace, shapes: list[Shape], drafts: list, flat: np.ndarray) -> Grid:
    """The grid points at flat indices of the axes of `_dims` (any order, no repeats), less those where
    one device drafts and verifies off the sequential schedule (only that schedule exists there)."""
    s, d, v, k, b = np.unravel_index(np.asarray(flat, dtype=np.int64), _dims(space, shapes, drafts))
    schedules = np.array([SCHEDULE_CHOICES.index(x) for x in space.schedules], dtype=np.int64)
    batches = np.asarray(space.batches, dtype=np.int64)
    same = np.array([[dv.name == vv.name for vv in space.verify_devices] for dv, _, _ in drafts], dtype=bool)
    keep = ~same[d, v] | (schedules[k] == SCHEDULE_CHOICES.index("sequential"))
    return Grid(shapes, drafts, s[keep], d[keep], v[keep], schedules[k][keep], batches[b][keep])


def build_grid(space: SearchSpace, shapes: list[Shape] | None = None) -> Grid:
    """The full grid: every shape x drafter variant x verifier x schedule x batch (one schedule,
    sequential, where draft and verify share a device)."""
    shapes = shapes if shapes is not None else build_shapes(space)[0]
    drafts = draft_variants(space)
    return grid_points(space, shapes, drafts, np.arange(math.prod(_dims(space, shapes, drafts))))


def grid_size(space: SearchSpace, shapes: list[Shape]) -> int:
    """How many points build_grid would make, without making them."""
    drafts = draft_variants(space)
    pairs = len(drafts) * len(space.verify_devices)
    same = sum(dv.name == vv.name for dv, _, _ in drafts for vv in space.verify_devices)
    per_pair = len(shapes) * len(space.batches)
    return per_pair * ((pairs - same) * len(space.schedules) + same * ("sequential" in space.schedules))


def grid_chunks(space: SearchSpace, shapes: list[Shape], points: int = 200_000):
    """The full grid in pieces of about `points` (whole (drafter, verifier) pairs, so each piece
    prices few hardware combinations), for scans that must not hold the grid in memory."""
    drafts = draft_variants(space)
    dims = _dims(space, shapes, drafts)
    pairs = dims[1] * dims[2]
    per_pair = dims[0] * dims[3] * dims[4]
    step = max(1, points // per_pair)
    inner = np.arange(per_pair)  # (shape, schedule, batch) offsets of one (drafter, verifier) pair
    s, k, b = np.unravel_index(inner, (dims[0], dims[3], dims[4]))
    for start in range(0, pairs, step):
        pair = np.arange(start, min(pairs, start + step))
        d, v = np.unravel_index(pair, (dims[1], dims[2]))
        flat = np.ravel_multi_index((np.tile(s, len(pair)), np.repeat(d, per_pair),
                                     np.repeat(v, per_pair), np.tile(k, len(pair)),
                                     np.tile(b, len(pair))), dims)
        yield grid_points(space, shapes, drafts, flat)


SAMPLE_POINTS_PER_COMBO = 200  # pricing a (drafter, verifier, batch) costs about as much as 200 points


def sample_grid(space: SearchSpace, shapes: list[Shape], count: int, seed: int) -> Grid:
    """About `count` grid points drawn at random (seeded), or the whole grid when it is no larger:
    hardware combinations (drafter variant, verifier, batch) first, then tree shapes and schedules
    within each, SAMPLE_POINTS_PER_COMBO of them, since pricing one combination costs as much as
    that many points (same-device points off the sequential schedule are dropped, as in build_grid)."""
    if count >= grid_size(space, shapes):
        return build_grid(space, shapes)
    drafts = draft_variants(space)
    n_shape, n_draft, n_verify, n_schedule, n_batch = dims = _dims(space, shapes, drafts)
    rng = np.random.default_rng(seed)
    inner = n_shape * n_schedule
    per = min(inner, SAMPLE_POINTS_PER_COMBO, count)
    combos = rng.choice(n_draft * n_verify * n_batch, size=min(n_draft * n_verify * n_batch, -(-count // per)),
                        replace=False)
    d, v, b = np.unravel_index(combos, (n_draft, n_verify, n_batch))
    picks = np.argsort(rng.random((len(combos), inner)), axis=1)[:, :per]  # distinct within each combination
    s, k = np.unravel_index(picks.ravel(), (n_shape, n_schedule))
    flat = np.ravel_multi_index((s, np.repeat(d, per), np.repeat(v, per), k, np.repeat(b, per)), dims)
    return grid_points(space, shapes, drafts, flat[:count])


def evaluate_grid(space: SearchSpace, grid: Grid) -> Evaluation:
    """evaluate_points over a Grid's index arrays."""
    return evaluate_points(space, grid.shapes, [d for d, _, _ in grid.drafts], grid.shape_idx, grid.draft_idx,
                           grid.verify_idx, grid.schedule_idx, grid.batch)


class GridFront(NamedTuple):
    """The non-dominated feasible points of a scan over grid points (tokens/s per sequence up, the
    space's cost down)."""

    grid: Grid  # the front's points
    values: np.ndarray  # (n, 2): tokens/s per sequence, the cost (space.cost)
    points: int  # points evaluated
    feasible: int
    worst_cost: float  # over every feasible point evaluated (the hypervolume's reference); nan if none
    reasons: dict  # why the infeasible points are: reason -> how many


def grid_front(space: SearchSpace, grids) -> GridFront:
    """Evaluate grids one after another, keeping only the running front (memory: one piece at a time).
    Of points with equal objectives the first evaluated stays."""
    kept, values, points, feasible, worst, reasons = None, np.empty((0, 2)), 0, 0, -np.inf, {}
    for grid in grids:
        ev = evaluate_grid(space, grid)
        ok = np.flatnonzero(ev.feasible)
        points, feasible = points + len(ev.feasible), feasible + len(ok)
        for reason, count in zip(*np.unique(ev.reason[~ev.feasible].astype(str), return_counts=True)):
            reasons[str(reason)] = reasons.get(str(reason), 0) + int(count)
        if not len(ok):
            kept = kept or Grid(grid.shapes, grid.drafts, *(a[:0] for a in grid[2:]))
            continue
        cost = getattr(ev, space.cost)
        worst = max(worst, float(cost[ok].max()))
        new = Grid(grid.shapes, grid.drafts, *(a[ok] for a in grid[2:]))
        both = new if kept is None else Grid(grid.shapes, grid.drafts,
                                             *(np.concatenate([x, y]) for x, y in zip(kept[2:], new[2:])))
        values = np.concatenate([values, np.stack([ev.tokens_per_s_per_sequence[ok], cost[ok]], axis=1)])
        mask = pareto_mask(values)
        kept, values = Grid(both.shapes, both.drafts, *(a[mask] for a in both[2:])), values[mask]
    if kept is None:
        raise ValueError("grid_front: no grid points")
    return GridFront(kept, values, points, feasible, worst if feasible else float("nan"), reasons)


def point_config(space: SearchSpace, shape: Shape, drafter: DeviceSpec, verifier: DeviceSpec, schedule: str,
                 batch: int) -> DecodeConfig:
    """The DecodeConfig of one point, for `estimate`, the simulator and exports."""
    same = drafter.name == verifier.name
    tree = TreeSpec(shape.parents, shape.ranks) if shape.parents is not None else None
    return DecodeConfig(space.target, SystemSpec(drafter, verifier, None if same else space.link_for(drafter)),
                        space.draft, space.acceptance, tree=tree, dynamic=shape.rule,
                        schedule="sequential" if schedule == "sequential" else "overlap",
                        gpu_fill=schedule == "overlap-fill", batch=batch, context=space.context, sync_s=space.sync_s,
                        record_bytes=space.record_bytes, name=f"{shape.family}{shape.params}")


def adapt_rule(space: SearchSpace, drafter: DeviceSpec, verifier: DeviceSpec, batch: int, width: int, budget: int,
               threshold: float, window_ratio: float, temperature: float, depth: int) -> AdaptRule:
    """ADAPT for one point: k_max = width, depth limit = depth, D_min from the window ratio."""
    step = float(device_forward_cost(space.draft, drafter, width, space.context, batch).time_s)
    verify = float(tree_verify_cost(space.target, verifier, budget, None, space.context, batch).time_s)
    d_min = int(min(depth, max(1, math.ceil(window_ratio * verify / step - 1e-9))))
    return AdaptRule(threshold, temperature, width, budget, d_min, depth)


@lru_cache(maxsize=2048)
def adapt_estimate(config: DecodeConfig, rounds: int):
    """`estimate` of an ADAPT design (Monte Carlo over rounds), cached: the search revisits designs."""
    return estimate(config, rounds=rounds, seed=0)
