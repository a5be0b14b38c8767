"""Host-CPU cost of a suffix-decoding round (dfvg_dse.reference.lookup.SuffixTrie), the suffix lookup
drafter's cost data (models/lookups/suffix-decoding.toml).

Run: python benchmarks/suffix_lookup.py [--repeats 301]
A round appends the tokens the verifier accepted (3 here) to the request's suffix tree and proposes
up to 24 tokens (vLLM 0.33's defaults: max_tree_depth 24, max_spec_factor 1, min_token_prob 0.1).
The text is code-like: a 32,000-token vocabulary whose tokens recur (each drawn from the 512 most
recent with probability 0.7), so matches are long and the walks deep. Contexts of 256..16,384
tokens, CPU time (time.process_time_ns, one thread), the median over repeats (the machine is shared
and noisy); fits seconds = a + b x context by least squares over the medians. Building the tree
over the prompt (once per request, O(prompt x depth)) is timed apart and is not a per-round cost.
Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dfvg_dse.reference.lookup import SuffixTrie

CONTEXTS = (256, 1024, 4096, 16384)
DEPTH, SPEC, ACCEPTED = 24, 24, 3


def text(length: int, seed: int = 0) -> np.ndarray:
    """Tokens that recur like code's: each repeats one of the last 512 with probability 0.7."""
    rng = np.random.default_rng(seed)
    out = rng.integers(0, 32000, size=length)
    for i in range(1, length):
        if rng.random() < 0.7:
            out[i] = out[max(0, i - 512) + int(rng.integers(0, min(i, 512)))]
    return out


def median_round_s(context: int, repeats: int) -> tuple[float, float]:
    """(median CPU seconds of a round, CPU seconds to build the tree over the context)."""
    tokens = text(context + ACCEPTED * repeats)
    trie = SuffixTrie(DEPTH)
    start = time.process_time_ns()
    trie.extend(tokens[:context])
    build = (time.process_time_ns() - start) * 1e-9
    times = []
    for r in range(repeats):
        new = tokens[context + ACCEPTED * r:context + ACCEPTED * (r + 1)]
        start = time.process_time_ns()
        trie.extend(new)
        trie.speculate(SPEC)
        times.append((time.process_time_ns() - start) * 1e-9)
    return statistics.median(times), build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=301)
    args = parser.parse_args()
    results = [median_round_s(c, args.repeats) for c in CONTEXTS]
    for c, (s, build) in zip(CONTEXTS, results):
        print(f"context {c:>6}: {s * 1e6:8.1f} us CPU a round (median of {args.repeats}); "
              f"tree over the prompt {build * 1e3:.1f} ms once")
    per_token, fixed = np.polyfit(np.array(CONTEXTS, dtype=float), np.array([s for s, _ in results]), 1)
    print(f"fit: lookup_s_per_round = {fixed:.3e}, lookup_s_per_context_token = {max(per_token, 0.0):.3e}")


if __name__ == "__main__":
    main()
