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


class SuffixTrie:
    """Suffix decoding's per-request suffix tree (Oliaro et al., SuffixDecoding, arXiv 2411.04975; vLLM's
    `suffix` method runs Arctic Inference's), as a trie of every suffix of the sequence cut at
    `max_depth` tokens: the node of a string counts the positions it starts at, the last ones
    included. Appending a token extends the (at most max_depth - 1) suffixes that end at the last
    token: O(max_depth) a token.

    `speculate` proposes one chain, as vLLM verifies it: for every match length m (1 up to
    max_depth - 1) the node of the sequence's last m tokens, and from it, token by token, the most
    frequent continuation, its estimated probability the product of count(child) / count(node) along
    the path; a token is proposed while that stays at or above `min_token_prob`, at most
    int(`max_spec_factor` x m) tokens and `k`; match and speculation stay within `max_depth`. Of the
    drafts of every m, the one with the largest sum of probabilities wins, the longer match on a tie.
    A tie between continuations goes to the smaller token id (Arctic Inference keeps its own order).
    The global tree of past requests' outputs is left out: one request's own text (docs/cost-model.md,
    "Lookup drafters")."""

    def __init__(self, max_depth: int):
        if max_depth < 2:
            raise ValueError(f"max_depth {max_depth}: must be >= 2 (a match and a continuation)")
        self.max_depth = max_depth
        self.root: dict = {}  # token -> [count, children]
        self.tokens: list[int] = []
        self._open: list[dict] = []  # the children tables of the suffixes ending at the last token

    def extend(self, tokens) -> None:
        """Append tokens to the sequence and every suffix they continue."""
        for token in (int(t) for t in tokens):
            self.tokens.append(token)
            opened = []
            for table in [self.root] + self._open:
                node = table.setdefault(token, [0, {}])
                node[0] += 1
                opened.append(node[1])
            self._open = opened[:self.max_depth - 1]  # a suffix of max_depth tokens takes no more

    @staticmethod
    def _path(count: int, table: dict, limit: int, min_token_prob: float) -> tuple[list[int], float]:
        """The most frequent continuation from a node of `count` positions: (tokens, sum of their
        probabilities)."""
        out, prob, score = [], 1.0, 0.0
        while table and len(out) < limit:
            token, (child, children) = min(table.items(), key=lambda item: (-item[1][0], item[0]))
            prob *= child / count
            if prob < min_token_prob:
                break
            out.append(token)
            score += prob
            count, table = child, children
        return out, score

    def speculate(self, k: int, max_spec_factor: float = 1.0, min_token_prob: float = 0.1) -> list[int]:
        """Up to `k` draft tokens continuing the sequence (none when nothing recurs)."""
        tokens, best, best_score = self.tokens, [], 0.0
        for m in range(1, min(self.max_depth, len(tokens))):
            table, count = self.root, 0
            for token in tokens[len(tokens) - m:]:
                count, table = table[token]
            limit = max(0, min(k, int(max_spec_factor * m + 1e-6)))
            draft, score = self._path(count, table, limit, min_token_prob)
            if score >= best_score:
                best, best_score = draft, score
        return best


def suffix_speculate(tokens, max_depth: int, k: int, max_spec_factor: float = 1.0,
                     min_token_prob: float = 0.1) -> list[int]:
    """SuffixTrie's proposal for a whole sequence at once (built from scratch)."""
    trie = SuffixTrie(max_depth)
    trie.extend(tokens)
    return trie.speculate(k, max_spec_factor, min_token_prob)
