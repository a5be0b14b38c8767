"""Prompt lookup (n-gram) drafting, model-free (issue 18): the tokens that followed the last
occurrence-before-now of the sequence's final n tokens, n from `max_ngram` down to `min_ngram`
(Saxena's prompt-lookup decoding tries the longest n first and takes the first match, as
transformers' PromptLookupCandidateGenerator does). What `benchmarks/ngram_lookup.py` times for
the lookup drafter's host-CPU cost (models/lookups/prompt-lookup.toml)."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def prompt_lookup(tokens, min_ngram: int, max_ngram: int, k: int) -> np.ndarray:
    """Up to `k` draft tokens continuing `tokens` (1-D ints), or none when no n-gram recurs."""
    tokens = np.asarray(tokens)
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        windows = sliding_window_view(tokens[:length - 1], n)  # every earlier start, the suffix itself excluded
        hits = np.flatnonzero((windows == tokens[length - n:]).all(axis=1))
        if hits.size:
            start = int(hits[0]) + n
            return tokens[start:start + k].copy()
    return tokens[:0].copy()
