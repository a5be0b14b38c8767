"""How repeatable calibrate --torch-device's forwards are: a few layers timed and scaled up, against the
whole model's depth timed as one call (issue 14, deliver 6).

Why: the 2026-12-04 H200 rows timed 2 layers and the head, then priced the model as n_layers x (stack -
head) / 2 + head. A timing's jitter then reaches the model's forward n_layers / 2 times, and rows of the
same shapes scattered up to 1.6x (docs/engines.md). reference/torch_bench.benchmark now times the whole
depth, cycling through a few layers' weights. This script makes one "run" of each method per repeat (each
a median of --inner timings after warm-up, as calibrate does), interleaved, and prints per setting the
median model seconds of each method, their spread over the runs (max / min) and the ratio of the medians.

    python benchmarks/torch_bench_depth.py [--model qwen2.5-0.5b] [--dtype bfloat16] [--device cpu|cuda:N]
        [--runs 7] [--inner 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from dfvg_dse.catalog import Catalog
from dfvg_dse.reference import torch_bench as tb
from dfvg_dse.specs import InputError

SETTINGS = ((1, 0, 1), (1, 512, 1), (16, 512, 1), (64, 0, 4))  # (n, c, b)
SCALED_LAYERS = 2  # the 2026-12-04 runs


def scaled_seconds(stack, model, n, c, b, inner) -> float:
    """The old method: SCALED_LAYERS layers and the head, minus the head alone, scaled to the depth."""
    whole = tb.time_forward(stack, n, c, b, inner, 2, depth=SCALED_LAYERS)
    head = tb.time_forward(stack, n, c, b, inner, 2, depth=0)
    return model.n_layers * (whole - head) / SCALED_LAYERS + head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--inner", type=int, default=5)
    args = parser.parse_args()
    model = Catalog.open().model(args.model)
    distinct = tb.distinct_layers(model, 8, tb.check_torch_device(args.device).type, args.dtype)
    stack = tb.build_layer_stack(model, distinct, args.device, args.dtype, seed=0)
    print(f"{args.model} ({model.n_layers} layers, {args.dtype}, {args.device}): whole depth cycles {distinct} layers' weights; "
          f"{args.runs} runs, each a median of {args.inner}")
    print(f"{'n':>4} {'c':>5} {'b':>3} | {'scaled ms':>9} {'max/min':>7} | {'whole ms':>8} {'max/min':>7} | scaled/whole")
    for n, c, b in SETTINGS:
        scaled, whole = [], []
        for _ in range(args.runs):
            scaled.append(scaled_seconds(stack, model, n, c, b, args.inner))
            whole.append(tb.time_forward(stack, n, c, b, args.inner, 2, depth=model.n_layers))
        s, w = statistics.median(scaled), statistics.median(whole)
        print(f"{n:>4} {c:>5} {b:>3} | {s * 1e3:9.2f} {max(scaled) / min(scaled):7.3f} | {w * 1e3:8.2f} "
              f"{max(whole) / min(whole):7.3f} | {s / w:.3f}")


if __name__ == "__main__":
    try:
        main()
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
