"""Workers on one run study (issue 13, item 7; a journal file since issue 16): `search --trials N` on the default space with
one process and with `--n-workers 3`, alternated, through the command line (start-up included).
Prints median wall and CPU seconds of each, their ratio, and the completed trials each run left
(always exactly N: the leases of dfvg_dse/search/studies.py). Asserts nothing about time.

Run: python benchmarks/bench_workers.py [--trials 600] [--repeats 3]   (about two minutes)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(base: Path, run_id: str, trials: int, workers: int) -> tuple[float, float, int, float]:
    """(wall s, CPU s of the process and its workers, completed trials, hypervolume fraction)."""
    command = [sys.executable, "-m", "dfvg_dse", "search", "--method", "optuna", "--trials", str(trials), "--results-dir", str(base),
               "--run-id", run_id, "--n-workers", str(workers), "--json"]
    cpu, start = _children_cpu_s(), time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    wall, cpu = time.perf_counter() - start, _children_cpu_s() - cpu
    summary = json.loads(out)  # its trials: the study's completed trials, read back from the journal
    return wall, cpu, summary["trials"], summary.get("hypervolume_fraction", float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = {1: [], 3: []}
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.repeats):
            for workers in (1, 3):
                results[workers].append(one_run(Path(folder), f"w{workers}-{i}", args.trials, workers))
    for workers, runs in results.items():
        print(f"{workers} process(es): median {statistics.median(r[0] for r in runs):.1f} s wall, "
              f"{statistics.median(r[1] for r in runs):.1f} s CPU, completed {sorted({r[2] for r in runs})}, "
              f"hypervolume {statistics.median(r[3] for r in runs):.4f} of the exact front")
    ratio = statistics.median(r[0] for r in results[3]) / statistics.median(r[0] for r in results[1])
    print(f"--n-workers 3 / one process, wall: {ratio:.2f}")


if __name__ == "__main__":
    main()
