"""Samplers on a space of 10^8 points (issue 16): benchmarks/large-space.toml, 105,740,800 grid points.

The best known front is the exact one (`search --method exact`: every grid point, in pieces, 5-8
minutes here). Each sampled search (`--method optuna` with each sampler, and `--method seeded`,
which first writes the front of 50,000 grid points drawn at random) gets the same trial budget;
its hypervolume is a share of the exact front's, with the reference point at zero speed and 1.1 x
the exact front's highest J/token (the nadir of the designs worth having: against the grid's worst
design, a slow DDR FPGA, every front would score near 100%). Medians over seeds; CPU time is the
child process's own. Prints figures; asserts nothing.

Run: python benchmarks/bench_large_space.py [--trials 2000] [--seeds 3] [--exact-run DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from bench_search import run_child  # benchmarks/bench_search.py

from dfvg_dse.pipeline.pareto import hypervolume

STUDY = Path(__file__).with_name("large-space.toml")
OBJECTIVES = ["tokens_per_s_per_sequence", "j_per_token"]
CASES = [("optuna", "nsga2"), ("optuna", "random"), ("optuna", "qmc"), ("optuna", "tpe"), ("seeded", "nsga2"),
         ("seeded", "random")]


def front_values(run: Path) -> np.ndarray:
    frame = pd.read_csv(run / "trials.csv")
    return frame[frame["feasible"]][OBJECTIVES].to_numpy()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--exact-run", type=Path, help="a finished `--method exact` run of the study to reuse")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exact_run = args.exact_run
        if exact_run is None:
            summary, wall, cpu, peak = run_child(["search", "--study", str(STUDY), "--method", "exact",
                                                  "--results-dir", tmp, "--run-id", "exact"])
            exact_run = Path(summary["run_dir"])
            print(f"exact: {summary['grid_points']:,} grid points in {cpu:.0f} s CPU ({wall:.0f} s wall, peak "
                  f"{peak:.0f} MiB); {summary['trials']} designs on the exact front")
        exact = front_values(exact_run)
        reference = (0.0, 1.1 * float(exact[:, 1].max()))
        best = hypervolume(exact, reference)
        print(f"{'method':8s} {'sampler':8s} {'hypervolume (median, min-max)':32s} {'CPU s (median)':>14s}")
        for method, sampler in CASES:
            shares, cpus = [], []
            for seed in range(args.seeds):
                summary, _, cpu, _ = run_child(["search", "--study", str(STUDY), "--method", method, "--sampler",
                                                sampler, "--trials", str(args.trials), "--seed", str(seed),
                                                "--results-dir", tmp, "--run-id", f"{method}-{sampler}-{seed}"])
                shares.append(hypervolume(front_values(Path(summary["run_dir"])), reference) / best)
                cpus.append(cpu)
            print(f"{method:8s} {sampler:8s} {100 * statistics.median(shares):6.2f}% "
                  f"({100 * min(shares):.2f}-{100 * max(shares):.2f}%){'':12s} {statistics.median(cpus):14.1f}")


if __name__ == "__main__":
    main()
