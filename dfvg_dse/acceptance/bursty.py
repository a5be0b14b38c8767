"""Bursty acceptance (issue 7): a two-state hidden Markov model of where the target's token falls
in the draft's ranking, position by position.

Measured on the reference pair, a round that follows a fully accepted round accepts its first
draft token 89% of the time, one that follows a rejection 32%: easy and hard stretches of text.
Drawing every round from one depth x rank profile then over-credits long chains. Here each
position of the text is in a hidden state s (0 easy, 1 hard) that stays with probability
stay[s] from one position to the next; in state s the target's token is the draft's rank-r
choice with probability p[s][r] (the rest: a rank the draft did not offer).

Traces give, per round, censored observations: an accepted node says "rank r"; the node where the
walk stopped says "none of its children's ranks"; a fully accepted path's bonus position says
nothing. The parameters maximise the likelihood of every run's sequence (a scaled forward pass,
all runs at once; scipy's L-BFGS-B). Expected tokens per round and the overlap schedule's hit
probability for a static tree come from simulating rounds against the state process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from dfvg_dse.specs import TreeSpec


@dataclass(frozen=True)
class BurstyProfile:
    """Two hidden states; rank_probs[s][r] for r < R (the remainder: any other rank)."""

    name: str
    rank_probs: tuple[tuple[float, ...], tuple[float, ...]]
    stay: tuple[float, float]
    log_likelihood: float = 0.0
    positions: int = 0
    source: str = ""

    def stationary(self) -> np.ndarray:
        return _stationary(np.asarray(self.stay))


def _stationary(stay: np.ndarray) -> np.ndarray:
    leave = 1.0 - stay
    total = leave.sum()
    return np.array([0.5, 0.5]) if total <= 1e-12 else np.array([leave[1], leave[0]]) / total


def _observations(runs: list[list[dict]], ranks: int) -> np.ndarray:
    """(runs, positions, ranks + 1) masks of the rank categories each position allows."""
    sequences = []
    for trace in runs:
        rows = []
        for record in trace:
            parents, node_ranks, path = record["parents"], record["ranks"], record["accepted"]
            children: dict[int, list[int]] = {}
            for i in range(1, len(parents)):
                children.setdefault(parents[i], []).append(i)
            for node in path[1:]:
                row = np.zeros(ranks + 1)
                row[min(node_ranks[node], ranks)] = 1.0
                rows.append(row)
            end = children.get(path[-1], [])
            row = np.ones(ranks + 1)
            if end:  # the target's token was none of the offered ranks
                for child in end:
                    if node_ranks[child] < ranks:
                        row[node_ranks[child]] = 0.0
            rows.append(row)  # a leaf's bonus position: no information (all ones)
        sequences.append(rows)
    length = max(len(s) for s in sequences)
    out = np.ones((len(sequences), length, ranks + 1))
    for i, rows in enumerate(sequences):
        out[i, :len(rows)] = rows
    return out


def _unpack(x: np.ndarray, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    logits = x[:2 * (ranks + 1)].reshape(2, ranks + 1)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    stay = 1.0 / (1.0 + np.exp(-x[2 * (ranks + 1):]))
    return probs, stay


def _log_likelihood(masks: np.ndarray, probs: np.ndarray, stay: np.ndarray) -> float:
    transition = np.array([[stay[0], 1 - stay[0]], [1 - stay[1], stay[1]]])
    alpha = np.tile(_stationary(stay), (masks.shape[0], 1))
    total = 0.0
    for t in range(masks.shape[1]):
        alpha = alpha * (masks[:, t] @ probs.T)  # emission: P(observation | state)
        scale = alpha.sum(axis=1, keepdims=True)
        total += float(np.log(scale).sum())
        alpha = (alpha / scale) @ transition
    return total


def fit_bursty(runs: list[list[dict]], name: str, source: str, ranks: int = 3, seed: int = 0) -> BurstyProfile:
    """Maximum-likelihood two-state model from traces, one list of round records per run (in
    order). State 0 is the easier one (higher rank-0 probability)."""
    masks = _observations([r for r in runs if r], ranks)
    rng = np.random.default_rng(seed)
    best = None
    starts = [np.concatenate([[2.0] + [0.0] * ranks, [0.0] * (ranks + 1), [2.0, 2.0]])]
    starts += [rng.normal(0, 1, 2 * (ranks + 1) + 2) for _ in range(3)]
    for start in starts:
        result = minimize(lambda x: -_log_likelihood(masks, *_unpack(x, ranks)), start, method="L-BFGS-B")
        if best is None or result.fun < best.fun:
            best = result
    probs, stay = _unpack(best.x, ranks)
    if probs[0, 0] < probs[1, 0]:
        probs, stay = probs[::-1], stay[::-1]
    return BurstyProfile(name, tuple(tuple(float(p) for p in row[:ranks]) for row in probs),
                         (float(stay[0]), float(stay[1])), -float(best.fun), int((masks.sum(axis=2) < ranks + 1).sum()),
                         source)


def simulate_rounds(tree: TreeSpec, profile: BurstyProfile, rounds: int = 40000, seed: int = 0,
                    run_tokens: int | None = None) -> tuple[float, float]:
    """(expected tokens per round, bonus included; overlap hit probability) of a static tree: the
    rank-0 path accepted in full and the bonus the draft's own top choice. Many independent
    processes run in parallel from the stationary state, each for many rounds; the first rounds
    are discarded. With `run_tokens`, a process restarts from the stationary state once it has
    produced that many tokens, as decoding runs of that length do (the fit assumes the same)."""
    ranks = len(profile.rank_probs[0])
    cumulative = np.cumsum(np.array([list(p) + [1.0 - sum(p)] for p in profile.rank_probs]), axis=1)
    child = np.full((len(tree.parents), ranks + 1), -1)
    for i in range(1, len(tree.parents)):
        if tree.ranks[i] < ranks:
            child[tree.parents[i], tree.ranks[i]] = i
    leaf = (child < 0).all(axis=1)
    rank0 = np.zeros(len(tree.parents), dtype=bool)
    rank0[0] = True
    for i in range(1, len(tree.parents)):
        rank0[i] = rank0[tree.parents[i]] and tree.ranks[i] == 0
    rng = np.random.default_rng(seed)
    # Few, long processes: states persist for ~100 positions, and an easy stretch yields fewer,
    # longer rounds than a hard one, so each process must run through many switches (giving every
    # process the same short number of rounds would over-weight the easy ones).
    chains, burn = 100, 50
    per_chain = max(1, rounds // chains) + burn
    state = (rng.random(chains) >= profile.stationary()[0]).astype(int)
    stay = np.asarray(profile.stay)
    tokens_sum = hits = counted = 0
    produced = np.zeros(chains, dtype=int)
    for round_index in range(per_chain):
        node = np.zeros(chains, dtype=int)
        active = np.ones(chains, dtype=bool)
        tokens = np.zeros(chains, dtype=int)
        hit = np.ones(chains, dtype=bool)
        while active.any():
            draw = rng.random(chains)
            category = (draw[:, None] > cumulative[state]).sum(axis=1)
            nxt = np.where(leaf[node], -1, child[node, np.minimum(category, ranks)])
            move = active & (nxt >= 0)
            stop = active & ~move
            hit &= ~stop | (rank0[node] & (category == 0))
            hit &= ~move | rank0[np.maximum(nxt, 0)]
            tokens += active  # an accepted token, or the bonus that ends the round
            # every position this round consumed moves the state process one step
            state = np.where(active & (rng.random(chains) >= stay[state]), 1 - state, state)
            node = np.where(move, nxt, node)
            active = move
        if round_index >= burn:
            tokens_sum += int(tokens.sum())
            hits += int(hit.sum())
            counted += chains
        if run_tokens:
            produced += tokens
            restart = produced >= run_tokens
            state = np.where(restart, (rng.random(chains) >= profile.stationary()[0]).astype(int), state)
            produced = np.where(restart, 0, produced)
    return tokens_sum / counted, hits / counted
