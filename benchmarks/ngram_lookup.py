"""Host-CPU cost of a prompt lookup (dfvg_dse.reference.lookup), the lookup drafter's cost data.

Run: python benchmarks/ngram_lookup.py [--repeats 301]
Times one lookup (max n-gram 3 down to 1, 10 tokens proposed) over contexts of 256..16,384 tokens
of a 32,000-token vocabulary, drawn at random so that the longest n-grams rarely recur and each
lookup scans the whole context (the worst case), with CPU time (time.process_time_ns, one thread)
and the median over repeats (the machine is shared and noisy). Fits seconds = a + b x context by
least squares over the medians: the numbers models/lookups/prompt-lookup.toml records.
Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dfvg_dse.reference.lookup import prompt_lookup

CONTEXTS = (256, 1024, 4096, 16384)


def median_lookup_s(context: int, repeats: int, seed: int = 0) -> float:
    tokens = np.random.default_rng(seed).integers(0, 32000, size=context)
    times = []
    for _ in range(repeats):
        start = time.process_time_ns()
        prompt_lookup(tokens, 1, 3, 10)
        times.append((time.process_time_ns() - start) * 1e-9)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=301)
    args = parser.parse_args()
    medians = [median_lookup_s(c, args.repeats) for c in CONTEXTS]
    for c, s in zip(CONTEXTS, medians):
        print(f"context {c:>6}: {s * 1e6:8.1f} us CPU (median of {args.repeats})")
    per_token, fixed = np.polyfit(np.array(CONTEXTS, dtype=float), np.array(medians), 1)
    print(f"fit: lookup_s_per_round = {fixed:.3e}, lookup_s_per_context_token = {per_token:.3e}")


if __name__ == "__main__":
    main()
