"""Search benchmarks (issues 5 and 16), on the default space unless said:

- the default `dfvg-dse search` (exact: 34,560 grid points) in <= 3 s of CPU, whole process;
- the same space sampled (`--method optuna`): 500 trials, 2,000 trials in <= 10 s of CPU, 20,000
  trials in <= 90 s of CPU with peak memory <= 400 MiB, each with its hypervolume as a share of
  the exact front's (target >= 0.99 at 2,000);
- an exhaustive grid of >= 1e5 points (target <= 10 s) and the exact scan's cost per point, which
  sets EXACT_MAX_POINTS (search/run.py).

Commands run as child processes (CPU time and peak memory are the child's own); prints figures,
asserts nothing about time. Run: python benchmarks/bench_search.py [--quick]  (about 4 minutes;
--quick leaves out the 20,000 trials)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.lookup import DEFAULT_ENGINE
from dfvg_dse.pipeline.grid import SearchSpace, grid_chunks, grid_front
from dfvg_dse.search import prepare, sweep_frame


def default_space(c: Catalog) -> SearchSpace:
    c = c.with_engine(DEFAULT_ENGINE)  # GPUs priced as `dfvg-dse search` prices them
    gpu = c.device("rtx-4090")
    drafts = (c.device("v80"), c.device("u280"), gpu, c.device("xeon-silver-4310"))
    links = tuple((d.name, c.link(d.host_link)) for d in drafts)
    return SearchSpace(c.model("qwen3-8b").with_dtypes("float16", "float16"),
                       c.model("qwen3-0.6b").with_dtypes("bfloat16", "bfloat16"),
                       c.acceptance("pair:qwen3-8b/qwen3-0.6b"), (gpu,), drafts, links,
                       sync_s=c.defaults().sync_per_round_s)


def run_child(args: list[str]) -> tuple[dict, float, float, float]:
    """(the command's --json summary, wall s, CPU s, peak MiB) of `dfvg-dse ARGS --json` in a child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "dfvg_dse", *args, "--json"], check=True, capture_output=True,
                         text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return json.loads(out.stdout), wall, cpu, after.ru_maxrss / 1024  # ru_maxrss: the largest child so far


def search(tmp: str, *args: str) -> tuple[dict, float, float, float]:
    return run_child(["search", "--results-dir", tmp, *args])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="leave out the 20,000-trial run")
    quick = parser.parse_args().quick
    c = Catalog.open()
    space = default_space(c)
    big = dataclasses.replace(space, verify_devices=(c.device("rtx-4090"), c.device("a100-80gb"), c.device("l40s")),
                              batches=(1, 2, 4, 8, 16))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        grid = sweep_frame(big)
        times.append(time.perf_counter() - start)
    print(f"grid: {len(grid):,} points evaluated in median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}; 3 runs)")
    shapes = prepare(big).shapes
    cpu = []
    for _ in range(3):
        start = time.process_time()
        front = grid_front(big, grid_chunks(big, shapes))
        cpu.append(time.process_time() - start)
    per_point = statistics.median(cpu) / front.points
    print(f"exact scan (grid_front over chunks): {front.points:,} points in median {statistics.median(cpu):.2f} s CPU, "
          f"{per_point * 1e6:.1f} us per point: 200,000 points in about {200_000 * per_point:.2f} s")

    with tempfile.TemporaryDirectory() as tmp:
        runs = [search(tmp, "--run-id", f"default-{i}") for i in range(3)]
        summary = runs[0][0]
        print(f"default `dfvg-dse search` ({summary['method']}, {summary['grid_points']:,} grid points, "
              f"{summary['trials']} trials written): CPU {', '.join(f'{r[2]:.2f}' for r in runs)} s "
              f"(median {statistics.median(r[2] for r in runs):.2f}), wall median "
              f"{statistics.median(r[1] for r in runs):.2f} s")
        cases = [("500", "0"), ("2000", "0"), ("2000", "1")] + ([] if quick else [("20000", "0")])
        for trials, seed in cases:
            summary, wall, cpu_s, peak = search(tmp, "--method", "optuna", "--trials", trials, "--seed", seed,
                                                "--run-id", f"optuna-{trials}-{seed}")
            print(f"--method optuna --trials {trials} --seed {seed}: {cpu_s:.1f} s CPU, {wall:.1f} s wall, peak "
                  f"{peak:.0f} MiB (largest child so far); hypervolume "
                  f"{100 * summary['hypervolume_fraction']:.2f}% of the exact front")


if __name__ == "__main__":
    main()
