"""Trace replay (issue 7): a static tree's tokens per round and overlap hit rate from teacher-forced
acceptance along the target's own text (specs.AcceptanceTrace), instead of from summary statistics.

Why: acceptance is bursty — easy stretches of text accept whole chains, hard ones reject at once —
and a round's outcome decides where the next round starts. Rounds drawn independently from one
depth x rank profile over-credit long chains (chain:8 +34% on the reference pair); a two-state
model (bursty.py) still missed by up to 10%. Greedy decoding is deterministic given the text, so
replaying the trace is exact:

- greedy: a round rooted at position t walks the tree, moving from a node to its child whose rank
  is ranks[t+1] (the target's token is the draft's rank-r choice there, and every accepted token is
  the target's own), then the target's bonus token t+1 becomes the next root. Tokens per round and
  the overlap hit (the rank-0 path accepted in full and the bonus the draft's first choice) are
  counted over every round of every run, as a measurement pools them.
- sampled (chains only): a token drafted at t is accepted with probability accept_probs[t]
  independently, given that the text so far follows the target; the expected outcome is a forward
  pass over where each round starts (probability mass per root position), not a simulation.

A run stops once it holds `run_tokens` tokens; its last round may accept past that (the trace
extends beyond `run_tokens` for this). Positions past the trace's end accept nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.specs import AcceptanceTrace, AdaptRule, TreeSpec


class ReplayResult(NamedTuple):
    tokens_per_round: float  # tokens over rounds, pooled over runs, bonus included
    hit_rate: float  # rounds whose outcome the overlap schedule guessed, over rounds
    rounds: float  # per run (expected, for sampled traces)


def _children(tree: TreeSpec) -> dict[tuple[int, int], int]:
    return {(p, r): i for i, (p, r) in enumerate(zip(tree.parents, tree.ranks)) if i}


def _is_chain(tree: TreeSpec) -> bool:
    return all(p == i - 1 and r == 0 for i, (p, r) in enumerate(zip(tree.parents, tree.ranks)) if i)


def replay_greedy_run(tree: TreeSpec, ranks, run_tokens: int) -> tuple[int, int, int]:
    """(tokens, rounds, hits) of one greedy run: the exact outcome of greedy speculative decoding."""
    child = _children(tree)
    guess_length = len(tree.rank0_path()) - 1  # the overlap schedule's guess
    limit = len(ranks)
    tokens = rounds = hits = 0
    root = 0
    while root + 1 < run_tokens:
        node, position, all_first = 0, root, True
        while position + 1 < limit and (node, ranks[position + 1]) in child:
            all_first = all_first and ranks[position + 1] == 0
            node, position = child[(node, ranks[position + 1])], position + 1
        accepted = position - root
        bonus_first = position + 1 < limit and ranks[position + 1] == 0
        hits += int(all_first and accepted == guess_length and bonus_first)
        tokens += accepted + 1
        rounds += 1
        root = position + 1
    return tokens, rounds, hits


def replay_sampled_chain_run(length: int, accept, bonus, run_tokens: int) -> tuple[float, float, float]:
    """(expected tokens, rounds, hits) of one sampled run of a chain of `length` draft tokens."""
    accept = np.concatenate([np.asarray(accept, dtype=float), np.zeros(length + 2)])
    bonus = np.concatenate([np.asarray(bonus, dtype=float), np.zeros(length + 2)])
    mass = np.zeros(run_tokens + length + 2)
    mass[0] = 1.0
    tokens = rounds = hits = 0.0
    for root in range(run_tokens - 1):
        m = mass[root]
        if m == 0.0:
            continue
        survive = np.concatenate([[1.0], np.cumprod(accept[root + 1:root + 1 + length])])  # P(first k accepted)
        stop = np.append(survive[:-1] * (1.0 - accept[root + 1:root + 1 + length]), survive[-1])  # P(exactly k)
        rounds += m
        tokens += m * float(stop @ (np.arange(length + 1) + 1))
        hits += m * survive[-1] * bonus[root + length + 1]
        mass[root + 1:root + length + 2] += m * stop
    return tokens, rounds, hits


def replay(tree: TreeSpec, trace: AcceptanceTrace) -> ReplayResult:
    """Tokens per round and overlap hit rate of `tree` over every run of the trace."""
    if trace.greedy:
        outcomes = [replay_greedy_run(tree, run, trace.run_tokens) for run in trace.ranks]
    elif _is_chain(tree):
        length = tree.n_nodes - 1
        outcomes = [replay_sampled_chain_run(length, a, b, trace.run_tokens)
                    for a, b in zip(trace.accept_probs, trace.bonus_probs)]
    else:
        raise ValueError(f"trace {trace.name}: a sampled trace replays chains only (multi-candidate sampling "
                         "needs the draft's whole distribution)")
    tokens, rounds, hits = (float(sum(x)) for x in zip(*outcomes))
    return ReplayResult(tokens / rounds, hits / rounds, rounds / len(outcomes))


def can_replay(rule, trace: AcceptanceTrace | None) -> bool:
    """Whether `rule` (a static tree or a dynamic rule) can be replayed against `trace`."""
    if trace is None:
        return False
    if isinstance(rule, AdaptRule):
        return trace.greedy and len(trace.top_probs) == len(trace.ranks)
    return isinstance(rule, TreeSpec) and (trace.greedy or _is_chain(rule))


class AdaptReplay(NamedTuple):
    tokens_per_round: float
    hit_rate: float
    widths: np.ndarray  # (rounds, levels): draft nodes per level of every replayed round


def _adapt_choose(rule: AdaptRule, level: int, spent: int, candidates: list, rng: np.random.Generator) -> list:
    """DFVG's ADAPT selection at one level (the reference drafter's rule): candidates are
    (log path probability, confidence, on the target's path, rank-0 chain) tuples."""
    eligible = [c for c in candidates if c[1] > rule.threshold]
    forced = not eligible and level <= rule.min_depth
    if forced:  # D_min: keep drafting below the threshold, one node per level
        eligible = candidates
    keys = [c[0] / rule.temperature + rng.gumbel() if rule.temperature > 0 else c[0] for c in eligible]
    order = sorted(range(len(eligible)), key=lambda i: -keys[i])
    reserve = max(0, min(rule.min_depth, rule.max_depth) - level)
    count = min(rule.k_max, len(eligible), max(rule.budget - spent - reserve, 1), rule.budget - spent)
    if forced:
        count = min(count, 1)
    return [eligible[i] for i in sorted(order[:count])]


def replay_adapt_run(rule: AdaptRule, ranks, top_probs: np.ndarray, run_tokens: int,
                     rng: np.random.Generator) -> tuple[int, int, int, list[list[int]]]:
    """(tokens, rounds, hits, per-round level widths) of one greedy run drafted by ADAPT.

    Approximate: the trace knows the draft's distribution only along the target's path, so every
    node of a level is given the children of that level's path node (the draft's top probabilities
    at that position); the target's token is the path node's child of rank ranks[t]."""
    limit, width_cap = len(ranks), min(rule.k_max, top_probs.shape[1])
    log_top = np.log(np.maximum(top_probs, 1e-300))
    tokens = rounds = hits = 0
    widths_all: list[list[int]] = []
    root = 0
    while root + 1 < run_tokens:
        frontier = [(0.0, True, True)]  # (log path probability, on the target's path, on the rank-0 chain)
        accepted, alive, first_chain, spent, level, widths = 0, True, 0, 0, 0, []
        while frontier and level + 1 <= rule.max_depth and spent < rule.budget and root + level + 1 < limit:
            level += 1
            position = root + level
            target_rank = ranks[position]
            candidates = [(logp + log_top[position, r], float(top_probs[position, r]), on_path and r == target_rank,
                           first and r == 0)
                          for logp, on_path, first in frontier for r in range(width_cap) if top_probs[position, r] > 0]
            picked = _adapt_choose(rule, level, spent, candidates, rng)
            spent += len(picked)
            widths.append(len(picked))
            frontier = [(c[0], c[2], c[3]) for c in picked]
            if alive and any(c[2] for c in picked):
                accepted += 1
            else:
                alive = False
            if first_chain == level - 1 and any(c[3] for c in picked):
                first_chain = level
        bonus_first = root + accepted + 1 < limit and ranks[root + accepted + 1] == 0
        all_first = all(ranks[root + i] == 0 for i in range(1, accepted + 1))
        hits += int(all_first and accepted == first_chain and bonus_first)
        tokens += accepted + 1
        rounds += 1
        widths_all.append(widths)
        root += accepted + 1
    return tokens, rounds, hits, widths_all


def replay_adapt(rule: AdaptRule, trace: AcceptanceTrace, seed: int = 0) -> AdaptReplay:
    """ADAPT's tokens per round, overlap hit rate and level widths over every run of a greedy trace
    with top probabilities (see replay_adapt_run for the approximation)."""
    rng = np.random.default_rng(seed)
    outcomes = [replay_adapt_run(rule, ranks, np.asarray(top), trace.run_tokens, rng)
                for ranks, top in zip(trace.ranks, trace.top_probs)]
    tokens = sum(o[0] for o in outcomes)
    rounds = sum(o[1] for o in outcomes)
    rows = [w for o in outcomes for w in o[3]]
    widths = np.zeros((len(rows), max((len(w) for w in rows), default=0) or 1))
    for i, w in enumerate(rows):
        widths[i, :len(w)] = w
    return AdaptReplay(tokens / rounds, sum(o[2] for o in outcomes) / rounds, widths)
