"""Engine profiles fitted to published forward measurements, and how well they predict a source
they never saw (issue 14; docs/engines.md).

Each measurement row becomes its work (FLOPs, weight and KV bytes: costs/work.py) on its device
(peak, bandwidth). One least-squares problem on log time fits, per engine, the kernel efficiencies
of each weight class it was measured with, its fixed overheads and the transition sharpness p; each
engine's parameters are tied to pooled ones by a prior (a log-deviation of PRIOR_SCALE costs as much
as one row off by that factor; EAGER_PRIOR_SCALE for the eager engines, whose Python launch
overheads are no sample of the graph-captured engines'), so an engine or class with few rows
borrows from the others and an engine with none is the pooled profile. The soft-L1 loss keeps a
few odd rows from steering it.

`leave_one_source_out` refits without each source in turn and predicts it: the error a user can
expect on a setting nobody here fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from dfvg_dse.costs.processor import engine_peak_flops_per_s, profile_time_parts
from dfvg_dse.costs.work import forward_work
from dfvg_dse.specs import DeviceSpec, ModelSpec
from dfvg_dse.specs.engines import FALLBACKS, EngineProfile, KernelEfficiency, query_heads_per_tile, weight_class
from dfvg_dse.specs.measurements import EAGER_ENGINES, ENGINE_FAMILIES, ForwardMeasurement

POOLED = "pooled"  # the profile of an engine with no rows: every engine's rows together
# log-parameter bounds: efficiencies, overheads (s), sharpness p
ETA_BOUNDS = (0.02, 1.0)
FORWARD_BOUNDS = (1e-7, 0.05)
LAYER_BOUNDS = (1e-8, 2e-3)
SEQUENCE_BOUNDS = (1e-9, 2e-3)
SHARPNESS_BOUNDS = (1.0, 64.0)
SCALE_BOUNDS = (0.1, 10.0)  # a device class's factor on the efficiencies (1: none)
PRIOR_SCALE = 1.0  # engine vs pooled, in log units
EAGER_PRIOR_SCALE = 10.0  # an eager engine (EAGER_ENGINES) vs pooled: tied only loosely
FAMILY_PRIOR_SCALE = 0.5  # a kernel family (ENGINE_FAMILIES) vs pooled; its engines tie to it at PRIOR_SCALE (chosen on LOSO, docs/engines.md)
# weak prior of the pooled profile toward the roofline's defaults (hwdb/defaults.toml), so a class
# nobody measured stays near them instead of wandering: (eta_c, eta_m, t_forward, t_layer, p, eta_attn,
# half_rows: the GEMM rows at which a kernel reaches half its efficiency, t_sequence, q: the sharpness
# of the host's per-layer launches overlapping the kernels, 1 = they add)
POOLED_PRIOR = (0.5, 0.78, 20e-6, 4e-6, 4.0, 0.5, 16.0, 1e-6, 1.0)
OVERLAP_BOUNDS = (1.0, 64.0)
HALF_ROWS_BOUNDS = (0.01, 4096.0)
POOLED_PRIOR_SCALE = 10.0
FIXED_SCALE = 1e-4  # the pooled profile held in place while the eager engines are fitted
EAGER_LAYER_START_S = 300e-6  # HF eager's ~0.5 ms per layer (issue 14) and torch eager's ~0.3 ms, in round numbers
LOSS_SCALE = 0.1  # soft-L1: rows off by more than ~10% count linearly, not quadratically


@dataclass(frozen=True)
class Features:
    """Per priced forward ("part"; a generation row has two): the work and device terms a profile
    prices, and which row it belongs to (`row`, `count` forwards of it). Per row: its classes,
    engine, source and measured seconds."""

    linear_flops: np.ndarray
    attention_flops: np.ndarray
    weight_bytes: np.ndarray
    kv_bytes: np.ndarray
    peak_flops_per_s: np.ndarray
    bandwidth_bytes_per_s: np.ndarray
    n_layers: np.ndarray
    rows: np.ndarray  # GEMM rows of the forward: new tokens x batch
    attention_rows: np.ndarray  # rows of attention's tiles: new tokens per sequence x the query heads of one tile
    batch: np.ndarray  # sequences of the forward
    count: np.ndarray
    row: np.ndarray
    weight_class: tuple[str, ...]
    kv_class: tuple[str, ...]
    device_class: tuple[str, ...]
    engine: tuple[str, ...]
    source: tuple[str, ...]
    measured_s: np.ndarray


def row_model(model: ModelSpec, row: ForwardMeasurement) -> ModelSpec:
    """The model as the row ran it: its dtypes and quantisation."""
    return model.with_dtypes(row.dtype, row.kv_dtype).with_quantisation(row.group_size, row.bits_per_weight)


def features(rows: list[ForwardMeasurement], models: dict[str, ModelSpec], devices: dict[str, DeviceSpec],
             fp16_accumulate: frozenset[str] = frozenset(), mma_sync_only: frozenset[str] = frozenset(),
             per_head_attention: frozenset[tuple[str, str]] = frozenset()) -> Features:
    """The terms of every row (models and devices by name, devices without an engine);
    `fp16_accumulate`: the engines whose 16-bit GEMMs accumulate in FP16, `mma_sync_only`: those whose
    GEMMs issue only warp-level mma.sync, `per_head_attention`: the (engine, KV class) pairs whose
    attention kernel tiles one query head, not a KV head's group (hwdb/engines/NAME.toml)."""
    cols: dict[str, list] = {k: [] for k in ("linear", "attention", "weight", "kv", "peak", "bw", "layers", "gemm_rows",
                                             "batch", "count", "row", "att_rows")}
    for i, row in enumerate(rows):
        model, device = row_model(models[row.model], row), devices[row.device]
        peak = engine_peak_flops_per_s(device, model.compute_dtype, row.engine in fp16_accumulate,
                                       row.engine in mma_sync_only)
        heads = query_heads_per_tile(model, {c for e, c in per_head_attention if e == row.engine})
        for n, context, count in row.priced_forwards:
            work = forward_work(model, n, context, row.batch)
            for key, value in (("linear", work.linear_flops), ("attention", work.attention_flops),
                               ("weight", work.weight_bytes), ("kv", work.kv_read_bytes + work.kv_write_bytes),
                               ("peak", peak), ("bw", device.main_memory.bandwidth_bytes_per_s),
                               ("layers", model.n_layers), ("gemm_rows", n * row.batch), ("batch", row.batch), ("count", count),
                               ("att_rows", n * heads),
                               ("row", i)):
                cols[key].append(float(value))
    a = {k: np.array(v, dtype=float) for k, v in cols.items()}
    return Features(a["linear"], a["attention"], a["weight"], a["kv"], a["peak"], a["bw"], a["layers"], a["gemm_rows"],
                    a["att_rows"], a["batch"], a["count"],
                    a["row"].astype(int), tuple(weight_class(r.dtype) for r in rows),
                    tuple(weight_class(r.kv_dtype) for r in rows), tuple(devices[r.device].device_class for r in rows),
                    tuple(r.engine for r in rows), tuple(r.source for r in rows),
                    np.array([r.measured_time_s for r in rows], dtype=float))


def _take(f: Features, rows: np.ndarray) -> Features:
    """The features of the rows where `rows` (a boolean mask over rows) is true, renumbered."""
    keep = np.flatnonzero(rows)
    renumber = np.full(len(rows), -1)
    renumber[keep] = np.arange(len(keep))
    parts = rows[f.row]
    per_part = {k: getattr(f, k)[parts] for k in ("linear_flops", "attention_flops", "weight_bytes", "kv_bytes", "peak_flops_per_s",
                                                   "bandwidth_bytes_per_s", "n_layers", "rows", "attention_rows", "batch", "count")}
    per_row = {k: tuple(getattr(f, k)[i] for i in keep) for k in ("weight_class", "kv_class", "device_class",
                                                                   "engine", "source")}
    return Features(**per_part, row=renumber[f.row[parts]], measured_s=f.measured_s[keep], **per_row)


def family_of(engine: str) -> str | None:
    """The group of an engine's kernel family (ENGINE_FAMILIES), or None for an engine of its own."""
    family = ENGINE_FAMILIES.get(engine)
    return None if family is None else f"family:{family}"


class _Layout:
    """Where each parameter sits in the vector: pooled first, then each kernel family, then each
    engine; per group the classes' (eta_c, eta_m), t_forward, t_layer, p, then per device class a
    (compute, bandwidth) scale — all as logs."""

    NAMES = ("t_forward", "t_layer", "p", "eta_attn", "half_rows", "t_sequence", "q")

    def __init__(self, engines: tuple[str, ...], classes: tuple[str, ...], device_classes: tuple[str, ...]):
        self.engines, self.classes, self.device_classes = engines, classes, device_classes
        self.width = 2 * len(classes) + len(self.NAMES) + 2 * len(device_classes)
        self.families = tuple(sorted({family_of(e) for e in engines} - {None}))
        self.groups = (POOLED,) + self.families + engines
        # per group after the pooled one: the index of the group it is tied to, and the tie's scale
        self.parents = np.array([self.groups.index(self.parent(g)) for g in self.groups[1:]], dtype=int)
        self.ties = np.array([self.tie(g) for g in self.groups[1:]])[:, None]

    def parent(self, group: str) -> str:
        """The group a group's parameters are tied to: an engine's family, a family's the pooled one."""
        family = family_of(group) if group in self.engines else None
        return family if family in self.families else POOLED

    def tie(self, group: str) -> float:
        """The prior scale of a group's tie to its parent (log units)."""
        if self.parent(group) != POOLED:
            return PRIOR_SCALE
        return EAGER_PRIOR_SCALE if group in EAGER_ENGINES else FAMILY_PRIOR_SCALE if group in self.families else PRIOR_SCALE

    def group_of(self, engine: str) -> str:
        """The group that prices an engine: itself when fitted, else its family, else the pooled one."""
        if engine in self.engines:
            return engine
        family = family_of(engine)
        return family if family in self.families else POOLED

    def index(self, group: str, name: str, cls: str | None = None) -> int:
        """The parameter's position; -1 for the scale of a device class the fit never saw (1)."""
        base = self.groups.index(group) * self.width
        if name in ("eta_c", "eta_m"):
            return base + 2 * self.classes.index(cls) + (name == "eta_m")
        if name in ("c_scale", "m_scale"):
            if cls not in self.device_classes:
                return -1
            return base + 2 * len(self.classes) + len(self.NAMES) + 2 * self.device_classes.index(cls) + (name == "m_scale")
        return base + 2 * len(self.classes) + self.NAMES.index(name)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        one = [ETA_BOUNDS] * (2 * len(self.classes)) + [FORWARD_BOUNDS, LAYER_BOUNDS, SHARPNESS_BOUNDS, ETA_BOUNDS,
                                                        HALF_ROWS_BOUNDS, SEQUENCE_BOUNDS, OVERLAP_BOUNDS] \
            + [SCALE_BOUNDS] * (2 * len(self.device_classes))
        lo, hi = zip(*(one * len(self.groups)))
        return np.log(lo), np.log(hi)

    def start(self) -> np.ndarray:
        eta_c, eta_m, fwd, layer, p, attn, half, sequence, overlap = POOLED_PRIOR
        one = [np.log(eta_c), np.log(eta_m)] * len(self.classes) \
            + [np.log(x) for x in (fwd, layer, p, attn, half, sequence, overlap)] \
            + [0.0] * (2 * len(self.device_classes))
        return np.array(one * len(self.groups))

    def row_indices(self, f: Features, groups: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Per row, the position of each parameter that prices it (computed once per fit)."""
        table = {
            "eta_c": [self.index(g, "eta_c", c) for g, c in zip(groups, f.weight_class)],
            "eta_m": [self.index(g, "eta_m", c) for g, c in zip(groups, f.weight_class)],
            "eta_kv": [self.index(g, "eta_m", c) for g, c in zip(groups, f.kv_class)],
            "c_scale": [self.index(g, "c_scale", c) for g, c in zip(groups, f.device_class)],
            "m_scale": [self.index(g, "m_scale", c) for g, c in zip(groups, f.device_class)],
        }
        table.update({k: [self.index(g, k) for g in groups] for k in self.NAMES})
        return {k: np.array(v, dtype=int) for k, v in table.items()}


def _predict(z: np.ndarray, f: Features, at: dict[str, np.ndarray]) -> np.ndarray:
    """Predicted seconds of each row, with the parameter positions `at` (_Layout.row_indices)."""
    v = np.append(np.exp(z), 1.0)  # position -1: a scale of 1
    per_part = {k: v[idx][f.row] for k, idx in at.items()}
    eta_c = np.minimum(1.0, per_part["eta_c"] * per_part["c_scale"])
    eta_m = np.minimum(1.0, per_part["eta_m"] * per_part["m_scale"])
    eta_kv = np.minimum(1.0, per_part["eta_kv"] * per_part["m_scale"])
    # per operator: the GEMMs stream the weights, attention streams the KV cache; the host's launches overlap them
    _, _, hosted = profile_time_parts(
        f.linear_flops, f.attention_flops, f.weight_bytes, f.kv_bytes, f.peak_flops_per_s * eta_c, f.rows,
        f.attention_rows, per_part["half_rows"], np.minimum(1.0, per_part["eta_attn"]), f.bandwidth_bytes_per_s * eta_m,
        f.bandwidth_bytes_per_s * eta_kv, per_part["p"], f.n_layers * per_part["t_layer"], per_part["q"])
    part = hosted + per_part["t_forward"] + f.batch * per_part["t_sequence"]
    return np.bincount(f.row, weights=part * f.count, minlength=len(f.measured_s))


def _residuals(z: np.ndarray, lay: _Layout, f: Features, at: dict[str, np.ndarray], centre: np.ndarray,
               spread: np.ndarray) -> np.ndarray:
    """Log errors of the rows, each group's tie to its parent (an engine's family, a family's or a
    familyless engine's pooled profile), and the pooled profile's prior (`centre`, `spread`: per
    parameter, in log units)."""
    data = np.log(_predict(z, f, at)) - np.log(f.measured_s)
    blocks = z.reshape(len(lay.groups), lay.width)
    prior = (blocks[1:] - blocks[lay.parents]) / lay.ties
    return np.concatenate([data, prior.ravel(), (blocks[0] - centre) / spread])


def _pooled_prior(lay: _Layout) -> tuple[np.ndarray, np.ndarray]:
    """The pooled profile's weak prior: the roofline's defaults, device-class scales near 1."""
    scales = np.arange(lay.width) >= lay.width - 2 * len(lay.device_classes)
    return lay.start()[:lay.width], np.where(scales, PRIOR_SCALE, POOLED_PRIOR_SCALE)


def _solve(f: Features, lay: _Layout, centre: np.ndarray, spread: np.ndarray, *starts: np.ndarray) -> np.ndarray:
    """The parameter vector of `lay` fitted to `f` by robust least squares on log time: the best
    of the fits from each start."""
    lo, hi = lay.bounds()
    args = (lay, f, lay.row_indices(f, f.engine), centre, spread)
    results = [least_squares(_residuals, np.clip(start, lo, hi), bounds=(lo, hi), args=args, loss="soft_l1",
                             f_scale=LOSS_SCALE, x_scale=1.0, max_nfev=400) for start in starts]
    return min(results, key=lambda r: r.cost).x


def _eager_starts(lay: _Layout, pooled: np.ndarray) -> tuple[np.ndarray, ...]:
    """Where the eager engines' fit starts: at the pooled profile, and at it with a host-bound
    per-layer overhead (EAGER_LAYER_START_S), which a start at the graph engines' microseconds
    does not climb to (the overhead and the efficiencies trade off along a long valley)."""
    host = pooled.copy()
    host[lay.index(POOLED, "t_layer")] = np.log(EAGER_LAYER_START_S)
    return np.tile(pooled, len(lay.groups)), np.concatenate([pooled, np.tile(host, len(lay.groups) - 1)])


@dataclass(frozen=True)
class EngineFit:
    """A fit: the parameter vector and the engines and classes it covers."""

    z: np.ndarray
    engines: tuple[str, ...]
    classes: tuple[str, ...]
    device_classes: tuple[str, ...]
    measured_classes: dict  # engine -> classes its rows used (weights and KV)
    rows: int

    @property
    def layout(self) -> _Layout:
        return _Layout(self.engines, self.classes, self.device_classes)

    def predict(self, f: Features) -> np.ndarray:
        """Seconds per row: each row by its engine's profile, else its family's, else the pooled one."""
        groups = tuple(self.layout.group_of(e) for e in f.engine)
        mapped = {k: tuple(self._nearest(c) for c in getattr(f, k)) for k in ("weight_class", "kv_class")}
        f = replace(f, **mapped)
        return _predict(self.z, f, self.layout.row_indices(f, groups))

    def borrowed(self) -> tuple[str, ...]:
        """Engines without rows of their own priced by a fitted family (ENGINE_FAMILIES): SGLang by
        the tuned family's profile."""
        lay = self.layout
        return tuple(sorted(e for e in ENGINE_FAMILIES if e not in self.engines and lay.group_of(e) != POOLED))

    def _nearest(self, cls: str) -> str:
        """A class the fit has: itself, or the nearest wider one (as EngineProfile.kernel falls back)."""
        return next((c for c in (cls,) + FALLBACKS.get(cls, ()) if c in self.classes), "16bit")

    def profile(self, engine: str, source: str, fp16_accumulate: bool = False, mma_sync_only: bool = False,
                per_head_attention: tuple[str, ...] = ()) -> EngineProfile:
        """One engine's fitted profile (POOLED for the pooled one): the classes it was measured with."""
        lay, v = self.layout, np.exp(self.z)
        group = self.layout.group_of(engine)
        classes = self.measured_classes.get(engine, self.classes) if group == engine else self.classes
        kernels = tuple(KernelEfficiency(c, float(min(1.0, v[lay.index(group, "eta_m", c)])),
                                         float(min(1.0, v[lay.index(group, "eta_c", c)])))
                        for c in sorted(set(classes) | {"16bit"}, key=lambda c: self.classes.index(c)))
        scales = tuple((c, float(v[lay.index(group, "c_scale", c)]), float(v[lay.index(group, "m_scale", c)]))
                       for c in self.device_classes)
        return EngineProfile(engine, kernels, float(v[lay.index(group, "t_forward")]),
                             float(v[lay.index(group, "t_layer")]),
                             float(np.clip(v[lay.index(group, "p")], *SHARPNESS_BOUNDS)),
                             attention_efficiency=float(min(1.0, v[lay.index(group, "eta_attn")])),
                             half_rows=float(v[lay.index(group, "half_rows")]),
                             sequence_overhead_s=float(v[lay.index(group, "t_sequence")]),
                             host_overlap=float(np.clip(v[lay.index(group, "q")], *OVERLAP_BOUNDS)),
                             fp16_accumulate=fp16_accumulate, mma_sync_only=mma_sync_only,
                             per_head_attention=per_head_attention, device_scales=scales,
                             source=source)


def fit_engines(f: Features) -> EngineFit:
    """Fit every engine in `f` (and the pooled profile) by robust least squares on log time.

    In two stages when both kinds are present: the pooled profile and the graph-captured engines
    first, then each eager engine (EAGER_ENGINES) tied to that pooled profile held fixed, so the
    eager engines' host-bound rows never move another engine's parameters (issue 14)."""
    engines = tuple(sorted(set(f.engine)))
    classes = tuple(sorted(set(f.weight_class) | set(f.kv_class) | {"16bit"}))
    device_classes = tuple(sorted(set(f.device_class) - {""}))  # a device of no class (a calibrated one) is unscaled
    lay = _Layout(engines, classes, device_classes)
    centre, spread = _pooled_prior(lay)
    eager = np.array([e in EAGER_ENGINES for e in f.engine])
    if not eager.any():
        z = _solve(f, lay, centre, spread, lay.start())
    elif eager.all():
        z = _solve(f, lay, centre, spread, *_eager_starts(lay, centre))
    else:
        graph_lay = _Layout(tuple(e for e in engines if e not in EAGER_ENGINES), classes, device_classes)
        graph_z = _solve(_take(f, ~eager), graph_lay, centre, spread, graph_lay.start())
        pooled = graph_z[:lay.width]
        eager_lay = _Layout(tuple(e for e in engines if e in EAGER_ENGINES), classes, device_classes)
        eager_z = _solve(_take(f, eager), eager_lay, pooled, np.full(lay.width, FIXED_SCALE),
                         *_eager_starts(eager_lay, pooled))
        blocks = {g: graph_z[i * lay.width:(i + 1) * lay.width] for i, g in enumerate(graph_lay.groups)}
        blocks.update({g: eager_z[i * lay.width:(i + 1) * lay.width] for i, g in enumerate(eager_lay.groups) if i})
        z = np.concatenate([blocks[g] for g in lay.groups])
    measured = {e: tuple(sorted({c for ee, w, k in zip(f.engine, f.weight_class, f.kv_class) if ee == e for c in (w, k)}))
                for e in engines}
    return EngineFit(z, engines, classes, device_classes, measured, len(f.measured_s))


def leave_one_source_out(f: Features) -> np.ndarray:
    """Each row predicted by a fit that never saw its source (seconds, one per row)."""
    predicted = np.empty_like(f.measured_s)
    sources = np.array(f.source)
    for source in sorted(set(f.source)):
        held = sources == source
        fit = fit_engines(_take(f, ~held))
        predicted[held] = fit.predict(_take(f, held))
    return predicted
