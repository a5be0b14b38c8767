"""Forward time of the shipped reference pair against the number of new tokens (issue 6).

Why: verifying k tokens costs more than one (OpenBLAS runs 2-16-row products through kernels of
very different speed), and that ratio, with the draft-to-target cost ratio, decides whether
speculation pays. The engine splits wide products into column blocks (tiny_lm.SMALL_GEMM_MACS);
`--compare-blocking` measures the same forwards without the split, alternated in one run.

Run with one BLAS thread, as the stage processes do:
    OPENBLAS_NUM_THREADS=1 python benchmarks/reference_forward.py [--repeats 40] [--compare-blocking]
Prints medians in ms and the ratio to one token.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import dfvg_dse.reference.tiny_lm as tiny_lm
from dfvg_dse.catalog import Catalog
from dfvg_dse.reference import Model, ReferenceConfig

CONTEXT = 100  # cached tokens before the new ones: a typical prompt


def load(role: str) -> Model:
    _, spec, tensors, _ = Catalog.read_checkpoint("builtin:tiny", role)
    return Model(tensors, ReferenceConfig(spec))


def time_forward(model: Model, n: int) -> float:
    start_length = model.cache.length
    start = time.perf_counter()
    model.run(list(range(n)), np.arange(start_length, start_length + n))
    elapsed = time.perf_counter() - start
    model.cache.keep(start_length, [])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--tokens", default="1,2,3,4,5,6,7,8,12,16")
    parser.add_argument("--compare-blocking", action="store_true", help="also time without column blocks")
    args = parser.parse_args()
    sizes = [int(x) for x in args.tokens.split(",")]
    limits = {"blocked": tiny_lm.SMALL_GEMM_MACS}
    if args.compare_blocking:
        limits["unblocked"] = 10**15
    models = {role: load(role) for role in ("target", "draft")}
    for model in models.values():
        model.run(list(range(CONTEXT)), np.arange(CONTEXT))
    times = {(role, label, n): [] for role in models for label in limits for n in sizes}
    for _ in range(args.repeats):  # alternate everything: this machine's speed drifts
        for n in sizes:
            for label, limit in limits.items():
                tiny_lm.SMALL_GEMM_MACS = limit
                for role, model in models.items():
                    times[(role, label, n)].append(time_forward(model, n))
    for role in models:
        for label in limits:
            one = statistics.median(times[(role, label, 1)])
            row = " ".join(f"{n}:{statistics.median(times[(role, label, n)]) * 1e3:.3f}ms"
                           f"({statistics.median(times[(role, label, n)]) / one:.2f}x)" for n in sizes)
            print(f"{role:6s} {label:9s} {row}")
    target_one = statistics.median(times[("target", "blocked", 1)])
    draft_one = statistics.median(times[("draft", "blocked", 1)])
    print(f"draft / target cost of one token: {draft_one / target_one:.3f}")


if __name__ == "__main__":
    main()
