"""Dynamic drafting: the tree grows from the draft's own confidences (docs/acceptance-and-trees.md, "Dynamic drafting").

Rules:
- ADAPT (DFVG, ASPLOS 2026, §4.2, from the paper's prose): level by level, keep the children of
  the frontier whose confidence exceeds tau, score them by path probability P_cum (product of
  confidences), and keep k_i = min(k_max, |candidates|, budget left) of them by Gumbel top-k on
  log P_cum / T (T = 0: plain top-k). Depth is at least D_min = ceil(T_verify / T_draft_step):
  a level with no candidate above tau still keeps its single best child until D_min is reached, and
  the budget keeps one node for every level still owed to D_min.
- EAGLE-2 (Li et al., arXiv 2406.16858): expand the top_k frontier nodes by their top_k children,
  keep the top_k of the top_k^2 by path score as the next frontier, `depth` times; then rerank every
  candidate and keep the best total_tokens - 1 (a child never outscores its parent, so the result
  is a tree).
- DuoDecoding (Lv et al., arXiv 2503.00784): k sequences of gamma / k tokens from the top-k first
  tokens, k from the top-8 first-token probabilities against l_1 x q(second | first), rounded
  down to a divisor of gamma (KaiLv69/DuoDecoding src/model_cpu.py, generate_k_seq).

Given the confidences drawn for a round, the expected tokens of the drafted tree are exact:
F = 1 + sum over drafted nodes of prod g(q) along the path (siblings exclusive). The expectation
over confidences is a seeded, vectorised Monte Carlo with its standard error; with no confidence
model (a plain rank vector as confidences) and T = 0 the tree is fixed and F is exact. The same
pass samples the target's actual choice at every node, which gives an independent direct
simulation of the accepted length.

Rounds are drawn in chunks (round_chunks): at most MAX_CHUNK_ROUNDS rounds and about CHUNK_CELLS
candidate cells at a time, chunk i from its own stream (SeedSequence(seed) spawn key (i,)), and the
statistics are merged chunk by chunk, so memory does not grow with the number of rounds; a run is
a function of (seed, rounds). Per-round arrays are kept only on request (keep_rounds). Work past
MAX_MC_WORK is refused up front (docs/acceptance-and-trees.md, "Limits").
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from dfvg_dse.specs import AcceptanceProfile, AdaptRule, ConfidenceModel, DuoRule, Eagle2Rule, InputError


def duo_sequences(first_probs, second_prob: float, gamma: int) -> int:
    """DuoDecoding's k: 1 + consecutive i >= 2 with l_i > l_1 x q(second | first), rounded down to a
    divisor of gamma (gamma 24 and 16: up to 8; gamma 12: the loop stops at 7; other gamma: 1)."""
    l = np.asarray(first_probs, dtype=float)
    threshold = l[0] * second_prob
    k = 1
    for value in l[1:]:
        if value <= threshold:
            break
        k += 1
    if gamma not in (12, 16, 24):
        return 1
    k = min(k, 7 if gamma == 12 else 8)
    return max(d for d in range(1, k + 1) if gamma % d == 0)


CHUNK_CELLS = 1 << 19  # candidate cells (rounds x nodes x ranks) drawn at once: arrays of 4 MB
MAX_CHUNK_ROUNDS = 4096
MAX_MC_WORK = 1e9  # rounds x round_work: about 30 s on the 2-core dev machine (docs/acceptance-and-trees.md, "Limits")
MAX_KEPT_CELLS = 1 << 22  # rounds x levels kept with keep_rounds: 32 MB a float copy (the estimate makes ~20)
NODE_WORK, POOL_WORK = 8, 2  # cost of a frontier node and of a rerank-pool cell, in candidate cells
# Caps on the rules' sizes, checked before any work (and the CLI options' ranges): far past what the
# engines run, yet small enough that a typo (gamma 1e9, top_k 1e5) is one line, not a hang.
MAX_DUO_GAMMA = 64  # DuoDecoding's own gammas are 12, 16 and 24 (duo_sequences); 64 is 2.7x its largest
MAX_EAGLE2_TOP_K = 64  # EAGLE-2 expands top_k = 10 in its experiments (arXiv 2406.16858); 64 is 6.4x that


class RoundChunk(NamedTuple):
    """Per-round results of one chunk of rounds."""

    expected: np.ndarray  # (n,) F given the round's confidences
    tokens: np.ndarray  # (n,) sampled accepted tokens + 1
    widths: np.ndarray  # (n, levels) drafted nodes per level; chunks may differ in levels
    deepest: np.ndarray  # (n,) deepest drafted level


class DynamicEstimate(NamedTuple):
    """Expected behaviour of a dynamic drafting rule per round."""

    expected_tokens: float  # F, bonus token included
    standard_error: float  # of the Monte Carlo mean (0 when exact)
    nodes_per_level: np.ndarray  # expected drafted nodes at depth 1, 2, ...
    expected_nodes: float  # expected draft tokens per round
    expected_depth: float  # expected deepest drafted level
    simulated_tokens: float  # direct simulation: mean accepted tokens + 1 from sampled target choices
    simulated_standard_error: float
    method: str  # "exact" or "monte-carlo"
    rounds: int
    round_expected: np.ndarray  # per round: F given that round's confidences (keep_rounds only, else empty)
    round_tokens: np.ndarray  # per round: sampled accepted tokens + 1 (keep_rounds only)
    round_widths: np.ndarray  # (rounds, levels): drafted nodes per level in each round (keep_rounds only)


def _confidences(profile: AcceptanceProfile, ranks: int) -> tuple[ConfidenceModel | None, np.ndarray]:
    """The profile's confidence model, or its rank vector used as fixed, calibrated confidences."""
    if profile.confidence is not None:
        return profile.confidence, np.array([])
    return None, np.pad(np.asarray(profile.rank_probs, dtype=float), (0, max(0, ranks - len(profile.rank_probs))))[:ranks]


class _Level(NamedTuple):
    logp: np.ndarray  # (R, W) log path confidence; -inf where no node
    acc: np.ndarray  # (R, W) probability the path to the node is accepted
    path: np.ndarray  # (R, W) bool: the node is on the sampled accepted path


def _children(level: _Level, depth: int, model, fixed: np.ndarray, ranks: int, rng) -> tuple:
    """Candidates below a frontier: (logp, acc, path, q) flattened to (R, W * ranks)."""
    rounds, width = level.logp.shape
    ranks = min(ranks, model.ranks if model is not None else len(fixed))  # the draft proposes no more
    if model is not None:
        q = model.sample(np.full((rounds, width), depth), rng)[..., :ranks]
        g = model.accept_prob(q)
    else:
        q = np.broadcast_to(fixed[:ranks], (rounds, width, ranks))
        g = q
    g = g / np.maximum(1.0, g.sum(axis=-1, keepdims=True))  # the target picks at most one child
    cum = np.cumsum(g, axis=-1)
    u = rng.random((rounds, width, 1))
    pick = np.where(u[..., 0] < cum[..., -1], (u < cum).argmax(axis=-1), -1)  # the target's rank, or none
    alive = np.isfinite(level.logp)[..., None]
    with np.errstate(divide="ignore"):
        logp = np.where(alive, level.logp[..., None] + np.log(q), -np.inf)
    acc = np.where(alive, level.acc[..., None] * g, 0.0)
    path = level.path[..., None] & (np.arange(ranks) == pick[..., None])
    flat = lambda a: a.reshape(rounds, width * ranks)  # noqa: E731
    return flat(logp), flat(acc), flat(path), flat(np.where(alive, q, 0.0))


def _take(keys: np.ndarray, count: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per round, the indices of the `count` largest keys (count <= width), best first, and a mask."""
    width = min(width, keys.shape[1])
    if width < keys.shape[1]:
        part = np.argpartition(-keys, width - 1, axis=1)[:, :width]
        order = np.take_along_axis(part, np.argsort(-np.take_along_axis(keys, part, axis=1), axis=1,
                                                    kind="stable"), axis=1)
    else:
        order = np.argsort(-keys, axis=1, kind="stable")
    kept = np.arange(width)[None, :] < count[:, None]
    return order, kept


def _gather(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.take_along_axis(a, idx, axis=1)


def _adapt_chunk(profile: AcceptanceProfile, rule: AdaptRule, rounds: int, rng, ranks: int) -> RoundChunk:
    """ADAPT over `rounds` independent rounds (module docstring)."""
    model, fixed = _confidences(profile, ranks)
    level = _Level(np.zeros((rounds, 1)), np.ones((rounds, 1)), np.ones((rounds, 1), dtype=bool))
    budget = np.full(rounds, rule.budget)
    f, tokens = np.ones(rounds), np.ones(rounds)
    widths, deepest = [], np.zeros(rounds)
    for depth in range(1, rule.max_depth + 1):
        logp, acc, path, q = _children(level, depth, model, fixed, ranks, rng)
        eligible = np.isfinite(logp) & (q > rule.threshold)
        forced = (eligible.sum(axis=1) == 0) & (depth <= rule.min_depth)
        eligible |= forced[:, None] & np.isfinite(logp)  # D_min: keep drafting below the threshold
        keys = logp / rule.temperature + rng.gumbel(size=logp.shape) if rule.temperature > 0 else logp.copy()
        keys = np.where(eligible, keys, -np.inf)
        # keep one node for every level still owed to D_min: the depth constraint binds the budget
        reserve = max(0, min(rule.min_depth, rule.max_depth) - depth)
        count = np.minimum.reduce([np.full(rounds, rule.k_max), eligible.sum(axis=1), np.maximum(budget - reserve, 1)])
        count = np.minimum(count, budget)
        count = np.where(forced, np.minimum(count, 1), count)
        if not count.any():
            break
        idx, kept = _take(keys, count, rule.k_max)
        level = _Level(np.where(kept, _gather(logp, idx), -np.inf), np.where(kept, _gather(acc, idx), 0.0),
                       kept & _gather(path, idx))
        f += level.acc.sum(axis=1)
        tokens += level.path.sum(axis=1)
        budget -= count
        widths.append(count)
        deepest = np.where(count > 0, depth, deepest)
    return RoundChunk(f, tokens, _stack(widths, rounds), deepest)


def _eagle2_chunk(profile: AcceptanceProfile, rule: Eagle2Rule, rounds: int, rng, ranks: int) -> RoundChunk:
    """EAGLE-2's expand-then-rerank tree over `rounds` rounds."""
    model, fixed = _confidences(profile, ranks)
    level = _Level(np.zeros((rounds, 1)), np.ones((rounds, 1)), np.ones((rounds, 1), dtype=bool))
    pool_logp, pool_acc, pool_path, pool_depth = [], [], [], []
    for depth in range(1, rule.depth + 1):
        logp, acc, path, _ = _children(level, depth, model, fixed, min(ranks, rule.top_k), rng)
        pool_logp.append(logp)
        pool_acc.append(acc)
        pool_path.append(path)
        pool_depth.append(np.full(logp.shape, depth, dtype=np.int16))
        idx, kept = _take(logp, np.full(rounds, rule.top_k), rule.top_k)
        level = _Level(np.where(kept, _gather(logp, idx), -np.inf), _gather(acc, idx), kept & _gather(path, idx))
    logp, acc, path, depth_of = (np.concatenate(a, axis=1) for a in (pool_logp, pool_acc, pool_path, pool_depth))
    keep = min(rule.total_tokens - 1, logp.shape[1])
    # stable order by score keeps a parent (created earlier) ahead of an equally scored child
    idx, kept = _take(np.where(np.isfinite(logp), logp, -np.inf), np.full(rounds, keep), keep)
    kept &= np.isfinite(_gather(logp, idx))
    f = 1.0 + np.where(kept, _gather(acc, idx), 0.0).sum(axis=1)
    tokens = 1.0 + (kept & _gather(path, idx)).sum(axis=1)
    chosen_depth = np.where(kept, _gather(depth_of, idx), 0)
    widths = [(chosen_depth == d).sum(axis=1) for d in range(1, rule.depth + 1)]
    return RoundChunk(f, tokens, _stack(widths, rounds), chosen_depth.max(axis=1).astype(float))


def _duo_chunk(profile: AcceptanceProfile, rule: DuoRule, rounds: int, rng, ranks: int) -> RoundChunk:
    """DuoDecoding's k sequences of gamma / k tokens over `rounds` rounds."""
    model, fixed = _confidences(profile, rule.top)
    root = _Level(np.zeros((rounds, 1)), np.ones((rounds, 1)), np.ones((rounds, 1), dtype=bool))
    logp, acc, path, q = _children(root, 1, model, fixed, rule.top, rng)  # (R, top) first tokens
    first = _Level(logp[:, :1], acc[:, :1], path[:, :1])
    second_q = _children(first, 2, model, fixed, rule.top, rng)[3][:, 0]  # q(greedy second | top-1 first)
    k = _duo_sequences_many(q, second_q, rule.gamma)
    length = rule.gamma // k
    f, tokens = np.ones(rounds), np.ones(rounds)
    chains = _Level(np.where(np.arange(logp.shape[1]) < k[:, None], logp, -np.inf), acc, path)
    f += np.where(np.isfinite(chains.logp), chains.acc, 0.0).sum(axis=1)
    tokens += (np.isfinite(chains.logp) & chains.path).sum(axis=1)
    widths = [k]
    for step in range(2, int(length.max()) + 1):
        c_logp, c_acc, c_path, _ = _children(chains, step, model, fixed, 1, rng)  # greedy continuation
        live = np.isfinite(c_logp) & (step <= length[:, None])
        chains = _Level(np.where(live, c_logp, -np.inf), np.where(live, c_acc, 0.0), live & c_path)
        f += chains.acc.sum(axis=1)
        tokens += chains.path.sum(axis=1)
        widths.append(live.sum(axis=1))
    return RoundChunk(f, tokens, _stack(widths, rounds), length.astype(float))


def _duo_sequences_many(first: np.ndarray, second: np.ndarray, gamma: int) -> np.ndarray:
    """duo_sequences for every round at once: first (R, top), second (R,) -> k (R,)."""
    if gamma not in (12, 16, 24):
        return np.ones(len(first), dtype=int)
    above = first[:, 1:] > (first[:, 0] * second)[:, None]  # (R, top - 1)
    k = np.minimum(1 + np.cumprod(above, axis=1).sum(axis=1), 7 if gamma == 12 else 8)
    divisor = np.array([0] + [max(d for d in range(1, j + 1) if gamma % d == 0) for j in range(1, 9)])
    return divisor[k]


def _stack(widths: list, rounds: int) -> np.ndarray:
    """Per-level width vectors -> (rounds, levels) integers."""
    return np.stack(widths, axis=1).astype(np.int32) if widths else np.zeros((rounds, 0), dtype=np.int32)


_DRAW = {AdaptRule: _adapt_chunk, Eagle2Rule: _eagle2_chunk, DuoRule: _duo_chunk}


class RoundWork(NamedTuple):
    """What one round of a dynamic rule costs, worst case over the draws (round_work)."""

    peak_cells: int  # candidate cells (nodes x ranks) a round holds at once: sizes the chunks
    work: int  # cost over all levels, in cell units: MAX_MC_WORK bounds rounds x work
    levels: int  # most levels a round drafts: MAX_KEPT_CELLS bounds rounds x levels with keep_rounds


def round_work(profile: AcceptanceProfile, rule, ranks: int | None = None) -> RoundWork:
    """What one round of `rule` costs (RoundWork), worst case over the draws. Measured
    (docs/acceptance-and-trees.md, "Limits"): a frontier node (one Beta draw of its children's
    confidences) costs about NODE_WORK cells, a cell of EAGLE-2's rerank pool POOL_WORK."""
    check_rule_size(rule)
    if isinstance(rule, DuoRule):  # first tokens, the greedy second, then `top` chains of up to gamma
        nodes, cells = 2 + (rule.gamma - 1) * rule.top, (rule.gamma + 1) * rule.top
        return RoundWork(rule.top, NODE_WORK * nodes + cells, rule.gamma)
    model, fixed = _confidences(profile, ranks or 16)
    if isinstance(rule, Eagle2Rule):
        children = min(ranks or rule.top_k, rule.top_k, model.ranks if model is not None else len(fixed))
        arrays = [1] + [min(rule.top_k, children ** d) for d in range(1, rule.depth)]
        pool = children * sum(arrays)
        return RoundWork(pool, NODE_WORK * sum(arrays) + (1 + POOL_WORK) * pool, rule.depth)
    children = min(ranks or 16, model.ranks if model is not None else len(fixed))
    positive = (1 + sum(s > 0 for s in model.tail_shares)) if model is not None else int(np.count_nonzero(fixed))
    arrays = _adapt_array_widths(rule, children, max(1, min(positive, children)))
    return RoundWork(max(arrays) * children, (NODE_WORK + children) * sum(arrays), len(arrays))


def _adapt_array_widths(rule: AdaptRule, children: int, positive: int) -> list[int]:
    """Frontier array widths of the ADAPT levels that run: with tau = 0 every child of positive
    confidence is eligible and the counts follow the budget; with tau > 0 a level may keep a single
    node, so every level up to min(max_depth, budget) may run (the bound is the worst case)."""
    arrays, array, width, left = [], 1, 1, rule.budget
    for depth in range(1, rule.max_depth + 1):
        arrays.append(array)  # the level's candidates: (rounds, array x children)
        reserve = max(0, min(rule.min_depth, rule.max_depth) - depth)
        count = min(rule.k_max, width * positive, max(left - reserve, 1), left) if rule.threshold == 0 else 1
        if count == 0 or (rule.threshold > 0 and depth >= rule.budget):
            break
        array, width, left = min(rule.k_max, array * children), count, left - count
    return arrays


def round_chunks(profile: AcceptanceProfile, rule, rounds: int, seed=0, ranks: int | None = None,
                 chunk_rounds: int | None = None, keep_rounds: bool = False):
    """The rounds of a dynamic rule as a stream of RoundChunk, drawn in chunks (module docstring).

    `seed` is an integer >= 0 or a numpy SeedSequence; chunk i draws from the child stream with
    spawn key (i,), so a run depends on (seed, rounds, chunk size) and never holds more than one
    chunk. Refuses past MAX_MC_WORK of work, up front, naming the largest `rounds` that fits (and,
    when the caller keeps every round, past MAX_KEPT_CELLS of per-round widths)."""
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise InputError(f"dynamic drafting: rounds = {rounds!r}: must be an integer >= 1")
    peak, work, levels = round_work(profile, rule, ranks)
    fits_work, fits_kept = int(MAX_MC_WORK // work), MAX_KEPT_CELLS // levels if keep_rounds else rounds
    if fits_work < 1:
        raise InputError(f"dynamic drafting: one round of {type(rule).__name__.removesuffix('Rule')} is {work:,} "
                         f"work units, past the {MAX_MC_WORK:.2g} limit; use a smaller tree")
    if rounds > fits_work and fits_work <= fits_kept:
        raise InputError(f"dynamic drafting: {rounds:,} rounds of {type(rule).__name__.removesuffix('Rule')} "
                         f"x {work:,} work units = {rounds * work:.1e}, past the {MAX_MC_WORK:.2g} limit (about "
                         f"30 s); use at most {fits_work:,} rounds or a smaller tree")
    if rounds > fits_kept:
        raise InputError(f"dynamic drafting: keeping {rounds:,} rounds x up to {levels} levels of widths is past the "
                         f"{MAX_KEPT_CELLS:,} limit; use at most {fits_kept:,} rounds or fewer levels")
    root = _seed_sequence(seed)
    size = chunk_rounds or max(1, min(MAX_CHUNK_ROUNDS, CHUNK_CELLS // peak))
    draw = _DRAW[type(rule)]
    for i, start in enumerate(range(0, rounds, size)):
        rng = np.random.default_rng(np.random.SeedSequence(root.entropy, spawn_key=root.spawn_key + (i,)))
        yield draw(profile, rule, min(size, rounds - start), rng,
                   ranks or (rule.top_k if isinstance(rule, Eagle2Rule) else 16))


def check_rule_size(rule) -> None:
    """A rule past MAX_DUO_GAMMA or MAX_EAGLE2_TOP_K is refused with one line, before anything is sized."""
    if isinstance(rule, DuoRule) and rule.gamma > MAX_DUO_GAMMA:
        raise InputError(f"duodecoding rule: gamma = {rule.gamma:,}: at most {MAX_DUO_GAMMA} draft tokens per round")
    if isinstance(rule, Eagle2Rule) and rule.top_k > MAX_EAGLE2_TOP_K:
        raise InputError(f"eagle-2 rule: top_k = {rule.top_k:,}: at most {MAX_EAGLE2_TOP_K}")


def _seed_sequence(seed) -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"dynamic drafting: seed = {seed!r}: must be an integer >= 0")
    return np.random.SeedSequence(int(seed))


def simulate_adapt(profile: AcceptanceProfile, rule: AdaptRule, rounds: int = 20000, seed: int = 0,
                   ranks: int = 16, *, chunk_rounds: int | None = None, keep_rounds: bool = False) -> DynamicEstimate:
    """Expected tokens, nodes per level and depth of ADAPT drafting (docs/acceptance-and-trees.md,
    "Dynamic drafting")."""
    exact = profile.confidence is None and rule.temperature == 0  # a fixed tree: F is the same in every round
    return _estimate(round_chunks(profile, rule, rounds, seed, ranks, chunk_rounds, keep_rounds), exact, keep_rounds)


def simulate_eagle2(profile: AcceptanceProfile, rule: Eagle2Rule, rounds: int = 10000, seed: int = 0,
                    ranks: int | None = None, *, chunk_rounds: int | None = None,
                    keep_rounds: bool = False) -> DynamicEstimate:
    """Expected tokens of EAGLE-2's expand-then-rerank tree."""
    return _estimate(round_chunks(profile, rule, rounds, seed, ranks or rule.top_k, chunk_rounds, keep_rounds),
                     profile.confidence is None, keep_rounds)


def simulate_duodecoding(profile: AcceptanceProfile, rule: DuoRule, rounds: int = 20000, seed: int = 0, *,
                         chunk_rounds: int | None = None, keep_rounds: bool = False) -> DynamicEstimate:
    """Expected tokens of DuoDecoding's k sequences of gamma / k tokens."""
    return _estimate(round_chunks(profile, rule, rounds, seed, None, chunk_rounds, keep_rounds),
                     profile.confidence is None, keep_rounds)


class _Moments:
    """Running count, mean and sum of squared deviations, merged chunk by chunk (Chan, Golub and
    LeVeque's pairwise update): the standard error without keeping the samples."""

    def __init__(self) -> None:
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def add(self, x: np.ndarray) -> None:
        n, mean = len(x), float(np.mean(x))
        delta, total = mean - self.mean, self.n + n
        self.m2 += float(np.sum((x - mean) ** 2)) + delta * delta * self.n * n / total
        self.mean += delta * n / total
        self.n = total

    def standard_error(self) -> float:
        return 0.0 if self.n < 2 else math.sqrt(self.m2 / (self.n - 1) / self.n)


def _estimate(chunks, exact: bool, keep_rounds: bool) -> DynamicEstimate:
    f, tokens, deepest = _Moments(), _Moments(), _Moments()
    width_sums = np.zeros(0)
    kept: list[RoundChunk] = []
    for chunk in chunks:
        f.add(chunk.expected)
        tokens.add(chunk.tokens)
        deepest.add(chunk.deepest)
        levels = max(len(width_sums), chunk.widths.shape[1])
        width_sums = np.pad(width_sums, (0, levels - len(width_sums))) + np.pad(
            chunk.widths.sum(axis=0), (0, levels - chunk.widths.shape[1]))
        if keep_rounds:
            kept.append(chunk)
    n = f.n
    mean_widths = width_sums / n
    if keep_rounds:
        per_round = np.concatenate([np.pad(c.widths, ((0, 0), (0, len(width_sums) - c.widths.shape[1])))
                                    for c in kept]).astype(float)
        round_f, round_t = (np.concatenate([getattr(c, k) for c in kept]) for k in ("expected", "tokens"))
    else:
        per_round, round_f, round_t = np.zeros((0, len(width_sums))), np.zeros(0), np.zeros(0)
    return DynamicEstimate(f.mean, 0.0 if exact else f.standard_error(), mean_widths, float(mean_widths.sum()),
                           deepest.mean, tokens.mean, tokens.standard_error(), "exact" if exact else "monte-carlo",
                           n, round_f, round_t, per_round)


def min_depth_for_windows(verify_time_s: float, draft_step_time_s: float) -> int:
    """DFVG's D_min = ceil(T_verify / T_draft_step): drafting fills the verification window (T13)."""
    return max(1, math.ceil(verify_time_s / draft_step_time_s - 1e-9))
