"""Cost-model throughput: evaluations per second for 1e6 (n, c) points on one device.

Run: python benchmarks/bench_costs.py [--points 1000000] [--repeats 7]
Prints the median over repeats (the machine is shared and noisy) for a GPU verifier and an FPGA
drafter; target >= 1e6 evaluations/s (issue 2). Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dfvg_dse.catalog import Catalog
from dfvg_dse.costs import device_forward_cost


def evaluations_per_s(model, device, points: int, repeats: int, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    n = rng.integers(1, 257, size=points)
    c = rng.integers(0, 8193, size=points)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        cost = device_forward_cost(model, device, n, c, 1)
        elapsed = time.perf_counter() - start
        assert cost.time_s.shape == (points,) and np.isfinite(cost.time_s).all()
        rates.append(points / elapsed)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    catalog = Catalog.open()
    cases = [("llama-2-7b", "a100-80gb"), ("qwen3-0.6b", "v80"), ("qwen3-0.6b", "xeon-8480plus")]
    for model_name, device_name in cases:
        rates = evaluations_per_s(catalog.model(model_name), catalog.device(device_name), args.points, args.repeats)
        print(f"{model_name:>12s} on {device_name:<14s} {args.points:.0e} points: median "
              f"{statistics.median(rates):.3e} evaluations/s (min {min(rates):.3e}, max {max(rates):.3e}, "
              f"{args.repeats} repeats)")


if __name__ == "__main__":
    main()
