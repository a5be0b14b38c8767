"""The sole matplotlib user: draws what report/tables and pipeline computed; nothing is computed here."""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
