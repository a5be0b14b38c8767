"""Search benchmarks (issue 5): a 2,000-trial search on the default space (target <= 60 s), an
exhaustive grid of >= 1e5 points (target <= 10 s), and the search front's hypervolume as a share
of the exact front (target >= 0.99). Prints figures; asserts nothing about time.

Run: python benchmarks/bench_search.py   (about a minute and a half)
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time

from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.lookup import DEFAULT_ENGINE
from dfvg_dse.pipeline.grid import SearchSpace
from dfvg_dse.pipeline.pareto import hypervolume
from dfvg_dse.search import run_search, sweep_frame, trials_frame


def default_space(c: Catalog) -> SearchSpace:
    c = c.with_engine(DEFAULT_ENGINE)  # GPUs priced as `dfvg-dse search` prices them
    gpu = c.device("rtx-4090")
    drafts = (c.device("v80"), c.device("u280"), gpu, c.device("xeon-silver-4310"))
    links = tuple((d.name, c.link(d.host_link)) for d in drafts)
    return SearchSpace(c.model("qwen3-8b").with_dtypes("float16", "float16"),
                       c.model("qwen3-0.6b").with_dtypes("bfloat16", "bfloat16"),
                       c.acceptance("pair:qwen3-8b/qwen3-0.6b"), (gpu,), drafts, links,
                       sync_s=c.defaults().sync_per_round_s)


def main() -> None:
    c = Catalog.open()
    space = default_space(c)
    # a larger grid: three verifiers and five batch sizes
    big = dataclasses.replace(space, verify_devices=(c.device("rtx-4090"), c.device("a100-80gb"), c.device("l40s")),
                              batches=(1, 2, 4, 8, 16))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        grid = sweep_frame(big)
        times.append(time.perf_counter() - start)
    print(f"grid: {len(grid):,} points evaluated in median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}; 3 runs)")
    exact = sweep_frame(space)
    exact = exact[exact["feasible"]][["tokens_per_s_per_sequence", "j_per_token"]].to_numpy()
    reference = (0.0, float(exact[:, 1].max()) * 1.1)
    runs = [("journal", 0), ("journal", 1), ("sqlite", 0)]  # the run folder's default since issue 16, and SQLite
    for kind, seed in runs:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"journal:{tmp}/bench.journal" if kind == "journal" else f"sqlite:///{tmp}/bench.db"
            start, cpu = time.perf_counter(), time.process_time()
            study = run_search(space, url, "bench", 2000, seed=seed)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            frame = trials_frame(study)
        found = frame[frame["feasible"]][["tokens_per_s_per_sequence", "j_per_token"]].to_numpy()
        share = hypervolume(found, reference) / hypervolume(exact, reference)
        print(f"search seed {seed}: 2,000 trials ({kind} storage) in {seconds:.1f} s wall, {cpu:.1f} s CPU; "
              f"hypervolume {100 * share:.2f}% of the exact front")

if __name__ == "__main__":
    main()
