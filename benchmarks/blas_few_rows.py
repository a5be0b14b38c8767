"""Cost of a k-row product against a 1-row one with this machine's BLAS (issue 6).

Why: speculative verification of k tokens multiplies k rows by every weight matrix. OpenBLAS runs
one row through gemv (each weight read once) and 2+ rows through sgemm, which packs the whole
weight matrix on every call; that is why verifying 2-16 tokens costs several autoregressive
steps here (docs/reference.md). Two weight sets: the shipped target's 16 matrices (4 layers of
256 wide, 12.6 MB) and a set larger than the cache.

Run with one BLAS thread, as the stage processes do:
    OPENBLAS_NUM_THREADS=1 python benchmarks/blas_few_rows.py [--repeats 40]
Prints, per row count, the median time over the set (ms) and its ratio to one row; row counts are
alternated within each repeat because this machine's speed drifts, sets are run one after the other.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

ROWS = (1, 2, 4, 8, 16)


def weight_set(width: int, layers: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A llama layer's fused products (qkv, out, gate+up, down) at `width`, FFN 2.6875 x width."""
    ffn = int(width * 2.6875)
    shapes = [(width, 3 * width), (width, width), (width, 2 * ffn), (ffn, width)] * layers
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sets = {"shipped target (4 x 256)": weight_set(256, 4, rng),
            "larger than the cache (4 x 512)": weight_set(512, 4, rng)}
    inputs = {(name, k): [rng.standard_normal((k, w.shape[0])).astype(np.float32) for w in ws]
              for name, ws in sets.items() for k in ROWS}
    times = {key: [] for key in inputs}
    for name, weights in sets.items():  # one set at a time: alternating them would evict each from the cache
        for _ in range(args.repeats):
            for k in ROWS:
                start = time.perf_counter()
                for x, w in zip(inputs[(name, k)], weights):
                    x @ w
                times[(name, k)].append(time.perf_counter() - start)
    for name, ws in sets.items():
        one = statistics.median(times[(name, 1)])
        megabytes = sum(w.nbytes for w in ws) / 1e6
        row = " ".join(f"{k}:{statistics.median(times[(name, k)]) * 1e3:.3f}ms"
                       f"({statistics.median(times[(name, k)]) / one:.2f}x)" for k in ROWS)
        print(f"{name}, {megabytes:.1f} MB: {row}")


if __name__ == "__main__":
    main()
