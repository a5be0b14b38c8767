"""Tree benchmarks: Sequoia DP at budget 256, depth 20, 32 ranks (target < 1 s, issue 3), the capped
greedy, and F(T) over many trees. Prints medians over repeats; asserts nothing about time.

Run: python benchmarks/bench_trees.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dfvg_dse.acceptance import expected_tokens_many
from dfvg_dse.catalog import Catalog
from dfvg_dse.tree import from_parents, greedy_tree, sequoia_dp


def timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def random_trees(count: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(count):
        n = int(rng.integers(16, 65))
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
        trees.append(from_parents(parents))
    return trees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    profile = Catalog.open().profile("sequoia-demo")  # 32 ranks
    dp = timed(lambda: sequoia_dp(profile, 256, 20), args.repeats)
    print(f"Sequoia DP, budget 256, depth 20, 32 ranks: median {statistics.median(dp):.3f} s "
          f"(min {min(dp):.3f}, max {max(dp):.3f})")
    greedy = timed(lambda: greedy_tree(profile, 256, 20, 8), args.repeats)
    print(f"capped greedy, budget 256, depth 20, k_max 8: median {statistics.median(greedy) * 1e3:.1f} ms")
    trees = random_trees(10_000)
    nodes = sum(t.n_nodes for t in trees)
    many = timed(lambda: expected_tokens_many(trees, profile), args.repeats)
    print(f"F(T) of 10,000 random trees ({nodes:,} nodes): median {statistics.median(many) * 1e3:.1f} ms = "
          f"{10_000 / statistics.median(many):.3e} trees/s")


if __name__ == "__main__":
    main()
