"""Greedy decoding with the reference engine: autoregressive, and speculative with a static tree
(a chain is a tree) drafted by a small model and verified by the target in one tree forward.

gpt-fast's shape: `speculative_step` calls `draft_tree`, `verify_tree` and `accept_tokens` in that
order, and `generate` returns the tokens and `accept_counts[k]`, the rounds that kept k draft
tokens — the histogram the acceptance model is checked against. Greedy verification keeps the
longest path whose every token is the target's argmax; the target's own next token (the bonus)
follows, so the output equals greedy autoregressive decoding token for token.

TODO(#6): sampling (SpecInfer/Sequoia multi-candidate), dynamic drafting, two processes over a
link.
"""

from __future__ import annotations

import time

import numpy as np

from dfvg_dse.reference.tiny_lm import KVCache, ReferenceConfig, forward


class Model:
    """Weights, config and a KV cache: one side of the decoder."""

    def __init__(self, weights: dict, config: ReferenceConfig):
        self.weights, self.config = weights, config
        self.cache = KVCache(config.spec.n_layers)

    def run(self, tokens, positions, parents=None) -> np.ndarray:
        return forward(self.weights, self.config, tokens, positions, self.cache, parents)


def generate_ar(target: Model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Greedy autoregressive decoding: the reference output."""
    logits = target.run(prompt, np.arange(len(prompt)))
    out = [int(np.argmax(logits[-1]))]
    while len(out) < max_new_tokens:
        logits = target.run([out[-1]], [len(prompt) + len(out) - 1])
        out.append(int(np.argmax(logits[-1])))
    return out


def _depths(parents: list[int]) -> list[int]:
    """Depth of every node below the root (node 0), parents before children."""
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    return depth


def draft_tree(draft: Model, last: int, position: int, parents: list[int],
               ranks: list[int]) -> tuple[list[int], list[float]]:
    """Tokens of a static tree whose root is `last` at `position`, and the draft's probability of
    each token given its parent (the root's is 1.0): node i is the draft's ranks[i]-th choice after
    its parent. Each level re-runs the partial tree as one tree forward (so every node attends to
    its own ancestors only), then the draft cache is rolled back to the prefix."""
    prefix = draft.cache.length
    depth = _depths(parents)
    tokens = [last] + [0] * (len(parents) - 1)
    confidences = [1.0] * len(parents)
    chain = list(parents) == list(range(-1, len(parents) - 1))
    for level in range(1, max(depth, default=0) + 1):
        known = [i for i in range(len(parents)) if depth[i] < level]  # ancestors first: topological
        if chain:  # every cached token is an ancestor: run only the newest one, roll back at the end
            rows = {level - 1: draft.run([tokens[level - 1]], [position + level - 1])[-1]}
        else:
            logits = draft.run([tokens[i] for i in known], [position + depth[i] for i in known],
                               [-1] + [known.index(parents[i]) for i in known[1:]])
            draft.cache.keep(prefix, [])
            rows = dict(zip(known, logits))
        for i in range(1, len(parents)):
            if depth[i] == level:
                row = rows[parents[i]]
                order = np.argsort(-row, kind="stable")
                tokens[i] = int(order[ranks[i]])
                probs = np.exp(row - row.max())
                confidences[i] = float(probs[tokens[i]] / probs.sum())
    draft.cache.keep(prefix, [])
    return tokens, confidences


def verify_tree(target: Model, tokens: list[int], position: int, parents: list[int]) -> np.ndarray:
    """Target logits (T, V) of every tree node in one forward; the cache keeps all of them for now."""
    depth = _depths(parents)
    return target.run(tokens, [position + d for d in depth], parents)


def accept_tokens(tokens: list[int], parents: list[int], logits: np.ndarray) -> tuple[list[int], int]:
    """Greedy acceptance: walk from the root while some child is the target's argmax.
    Returns (accepted node indices, root first) and the bonus token (the target's next token)."""
    children: dict[int, list[int]] = {}
    for i in range(1, len(parents)):
        children.setdefault(parents[i], []).append(i)
    path, node = [0], 0
    while True:
        best = int(np.argmax(logits[node]))
        nxt = next((c for c in children.get(node, []) if tokens[c] == best), None)
        if nxt is None:
            return path, best
        path.append(nxt)
        node = nxt


# One token record on the link: id (int32), confidence (float32), alignment and padding to 16 bytes.
TOKEN_RECORD_BYTES = 16


def generate_speculative(target: Model, draft: Model, prompt: list[int], max_new_tokens: int, parents: list[int],
                         ranks: list[int], trace: list | None = None) -> tuple[list[int], np.ndarray]:
    """Greedy speculative decoding with a static tree (parents, ranks of a TreeSpec, root first).
    Returns the new tokens and accept_counts[k]: rounds that kept k draft tokens. When `trace` is a
    list, one record per round is appended in the calibration trace format (docs/trace-format.md):
    stage times in seconds from the start of decoding, link_bytes = one 16-byte record per draft
    token sent plus one per token of the verdict (accepted path and bonus)."""
    clock = time.perf_counter
    origin = clock()
    logits = target.run(prompt, np.arange(len(prompt)))
    out = [int(np.argmax(logits[-1]))]
    counts = np.zeros(len(parents), dtype=int)
    while len(out) < max_new_tokens:
        position = len(prompt) + len(out) - 1  # where the newest token, the tree's root, sits
        # the draft's cache holds every token before the root: catch up on what it has not seen
        missing = (prompt + out[:-1])[draft.cache.length:]
        if missing:
            draft.run(missing, np.arange(draft.cache.length, draft.cache.length + len(missing)))
        draft_start = clock()
        tokens, confidences = draft_tree(draft, out[-1], position, parents, ranks)
        verify_start = clock()
        prefix = target.cache.length
        verdict = verify_tree(target, tokens, position, parents)
        path, bonus = accept_tokens(tokens, parents, verdict)
        target.cache.keep(prefix, path)  # rollback: only the accepted path stays
        verify_end = clock()
        counts[len(path) - 1] += 1
        if trace is not None:
            trace.append({"round": int(counts.sum()) - 1, "parents": list(parents), "ranks": list(ranks),
                          "confidences": confidences, "accepted": path,
                          "draft_start_s": draft_start - origin, "draft_end_s": verify_start - origin,
                          "verify_start_s": verify_start - origin, "verify_end_s": verify_end - origin,
                          "link_bytes": TOKEN_RECORD_BYTES * (len(tokens) - 1 + len(path))})
        out += [tokens[i] for i in path[1:]] + [bonus]
    return out[:max_new_tokens], counts


def greedy_agreement(target: Model, draft: Model, prompt: list[int], max_new_tokens: int) -> tuple[int, int]:
    """(positions where the draft's argmax equals the target's, positions compared) along the
    target's own greedy continuation of `prompt`, teacher-forced: the per-token acceptance of
    greedy speculative decoding. Both models must have empty caches; they are left filled."""
    continuation = generate_ar(target, prompt, max_new_tokens)
    full = prompt + continuation[:-1]  # every token whose next token the target chose
    target.cache.keep(0, [])
    wanted = np.argmax(target.run(full, np.arange(len(full))), axis=-1)[len(prompt) - 1:]
    guessed = np.argmax(draft.run(full, np.arange(len(full))), axis=-1)[len(prompt) - 1:]
    return int(np.sum(wanted == guessed)), len(wanted)
