"""The sole matplotlib user: draws what report/tables and pipeline computed; nothing is computed here."""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt



def _save(plt, fig, path: str | Path) -> None:
    """Lay out, write in the format the suffix names (PNG without one) and free the figure.

    A backend that fails while rendering the file (an image too large for Agg, a libpng error)
    raises OSError, as a failed write does, so the writer names the file in one line."""
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=120, format=Path(path).suffix.lstrip(".") or "png")
    except (ValueError, RuntimeError, MemoryError) as err:
        raise OSError(f"the plot backend failed: {err}") from err
    finally:
        plt.close(fig)

def plot_compare(rows: list[dict], path: str | Path, title: str) -> None:
    """Bars of speedup and energy efficiency against AR for every scenario (feasible ones)."""
    plt = _pyplot()
    rows = [r for r in rows if r.get("feasible")]
    names = [r["name"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in ((axes[0], "speedup_vs_ar", "speedup over AR (x)"),
                           (axes[1], "energy_efficiency_vs_ar", "tokens per joule over AR (x)")):
        values = [r[key] for r in rows]
        bars = ax.bar(names, values, color=["#888888" if n == "ar" else "#3465a4" if n in ("dfvg", "+overlap")
                                            else "#73a0d6" for n in names])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=45)
        for bar, value in zip(bars, values):
            ax.annotate(f"{value:.2f}", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom", fontsize=8)
    fig.suptitle(title)
    _save(plt, fig, path)


def plot_sweep(sweep, path: str | Path, title: str) -> None:
    """Speedup over AR against one varied factor, one line per scenario; gaps where infeasible."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    categorical = any(isinstance(x, str) for x in sweep.x)
    xs = list(range(len(sweep.x))) if categorical else sweep.x
    for name, values in sweep.speedup.items():
        ax.plot(xs, [float("nan") if v is None else v for v in values], marker="o", label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    if categorical:
        ax.set_xticks(xs, sweep.x, rotation=30, ha="right")
    elif sweep.vary == "link-latency" or sweep.vary == "batch":
        ax.set_xscale("log")
    ax.set_xlabel(sweep.x_label)
    ax.set_ylabel("speedup over AR on the same GPU (x)")
    ax.set_title(f"{title}\n{sweep.crossover}", fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    _save(plt, fig, path)


def plot_pareto(info, path: str | Path, title: str) -> None:
    """Tokens/s against the cost (J/token or $/Mtoken): points coloured by placement and schedule, the
    front drawn, picks marked."""
    plt = _pyplot()
    import numpy as np

    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    feasible = info.feasible
    if (~feasible).any():
        ax.scatter(info.cost[~feasible], info.tokens_per_s[~feasible], s=8, c="#cccccc", marker="x",
                   label="infeasible")
    groups = sorted(set(info.group[feasible]))
    cmap = plt.get_cmap("tab10" if len(groups) <= 10 else "tab20")
    for i, group in enumerate(groups):
        m = feasible & (info.group == group)
        ax.scatter(info.cost[m], info.tokens_per_s[m], s=12, alpha=0.6, color=cmap(i % cmap.N), label=group)
    if len(info.front):
        ax.plot(info.cost[info.front], info.tokens_per_s[info.front], color="black", linewidth=1.2,
                label="Pareto front")
    labels: dict[int, list[str]] = {}
    for name, marker in (("max-throughput", "^"), (info.objective.pick, "v"), ("knee", "*")):
        if name in info.picks:
            i = info.picks[name]
            labels.setdefault(i, []).append(name)
            ax.scatter([info.cost[i]], [info.tokens_per_s[i]], s=160, marker=marker, facecolor="none",
                       edgecolor="red", linewidth=1.6, zorder=5)
    for i, names in labels.items():  # one label per point, even when two picks coincide
        ax.annotate(" = ".join(names), (info.cost[i], info.tokens_per_s[i]), textcoords="offset points",
                    xytext=(10, 6), fontsize=9, color="red")
    finite = info.cost[feasible]
    if len(finite):
        ax.set_xlim(0, float(np.percentile(finite, 99)) * 1.1)
    ax.set_xlabel(f"{info.objective.label} ({info.objective.unit})")
    ax.set_ylabel("decode speed (tokens/s per sequence)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    _save(plt, fig, path)


def plot_importance(importances: dict, path: str | Path, title: str) -> None:
    """Horizontal bars of parameter importance for throughput."""
    plt = _pyplot()
    names = list(importances)[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(names) + 1.5))
    ax.barh(names, [importances[n] for n in names], color="#3465a4")
    ax.set_xlabel("importance for tokens/s (PED-ANOVA, share)")
    ax.set_title(title, fontsize=10)
    _save(plt, fig, path)


def plot_validation(rows: list[dict], path: str | Path, title: str) -> None:
    """Predicted against measured decode tokens/s and tokens per round, one point per
    configuration, with the y = x line (validate)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    for ax, metric, label in ((axes[0], "tokens_per_s", "decode tokens/s"),
                              (axes[1], "tokens_per_round", "tokens per round")):
        measured = [r[f"measured_{metric}"] for r in rows]
        predicted = [r[f"predicted_{metric}"] for r in rows]
        top = max(measured + predicted) * 1.1
        ax.plot([0, top], [0, top], color="black", linewidth=0.8, label="y = x")
        for row, x, y in zip(rows, measured, predicted):
            colour = "#888888" if row["drafting"] == "ar" else "#3465a4" if row["schedule"] == "overlap" else "#cc0000"
            ax.scatter([x], [y], color=colour, s=22)
            ax.annotate(row["config"], (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    _save(plt, fig, path)


def plot_fidelity(records: list[dict], path: str | Path, title: str) -> None:
    """Predicted (leave-one-source-out) against measured seconds on log-log axes, one point per
    published row, coloured by engine, with y = x and the ±25% band (validate --anchors)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    measured = [r["measured_s"] for r in records]
    predicted = [r["loso_predicted_s"] for r in records]
    low, high = min(measured + predicted) / 1.5, max(measured + predicted) * 1.5
    ax.plot([low, high], [low, high], color="black", linewidth=0.8, label="y = x")
    for factor in (0.75, 1.25):
        ax.plot([low, high], [low * factor, high * factor], color="#888888", linewidth=0.6, linestyle="--")
    engines = sorted({r["engine"] for r in records})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, engine in enumerate(engines):
        mine = [r for r in records if r["engine"] == engine]
        ax.scatter([r["measured_s"] for r in mine], [r["loso_predicted_s"] for r in mine], s=12,
                   color=colours[i % len(colours)], label=f"{engine} ({len(mine)})", alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("predicted time, leave-one-source-out (s)")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title, fontsize=9)
    _save(plt, fig, path)


def plot_serving(records: list[dict], path: str | Path, title: str, slo_tpot_s: float, slo_ttft_s: float) -> None:
    """Latency against offered load, one line per design: TPOT (p50 solid, p90 dashed) and TTFT p90,
    the SLOs as horizontal lines."""
    import math

    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    designs = list(dict.fromkeys(r["design"] for r in records))
    for i, name in enumerate(designs):
        rows = sorted((r for r in records if r["design"] == name), key=lambda r: r["offered_rate_per_s"])
        x = [r["offered_rate_per_s"] for r in rows]
        colour = f"C{i}"
        ms = lambda v: math.nan if v is None else 1e3 * v  # noqa: E731  (a run without requests: a gap)
        left.plot(x, [ms(r["tpot_s"]["p50"]) for r in rows], marker="o", color=colour, label=f"{name} p50")
        left.plot(x, [ms(r["tpot_s"]["p90"]) for r in rows], linestyle="--", color=colour, label=f"{name} p90")
        right.plot(x, [ms(r["ttft_s"]["p90"]) for r in rows], marker="o", color=colour, label=name)
    for ax, slo, what in ((left, slo_tpot_s, "TPOT"), (right, slo_ttft_s, "TTFT")):
        if math.isfinite(slo):
            ax.axhline(1e3 * slo, color="black", linewidth=0.9, linestyle=":", label=f"SLO {what} {1e3 * slo:g} ms")
        ax.set_xlabel("offered load (requests/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    left.set_ylabel("time per output token (ms)")
    right.set_ylabel("time to first token, p90 (ms)")
    right.set_yscale("log")
    fig.suptitle(title, fontsize=10)
    _save(plt, fig, path)
