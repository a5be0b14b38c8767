"""Discrete-event twin of the pipeline (docs/pipeline.md, "Closed form against the simulator"):
rounds one after another, with sampled outcomes.

It shares only the stage costs (costs/) and the dynamic-drafting sampler (acceptance/) with the
closed forms of pipeline/, never their algebra, so it cross-checks them:
- accepted tokens are sampled by walking the tree with the target's choice at every accepted node
  (rank r with P[depth, r]), not taken from F(T);
- the overlap hit is the sampled event "the rank-0 path was accepted in full and the bonus token
  agreed", and the timeline is built event by event: tree k+1 leaves the drafter at
  max(draft done, verdict k) after a hit, at verdict k + D after a miss;
- dynamic trees are drawn round by round, each with its own draft and verify times.
It also gives what closed forms cannot: percentiles of the time per output token, idle time per
device and the share of wasted draft work. Seeded and vectorised, CHUNK_ROUNDS rounds at a time:
chunk i draws from its own stream (SeedSequence(seed), spawn key (0, i); dynamic trees (1,), then
(i,)), the statistics are summed chunk by chunk and the percentiles come from fixed log-spaced
histograms (relative resolution 1e-4), so memory does not grow with the number of rounds and a run
is a function of (seed, rounds, chunk_rounds). Work past MAX_SIM_WORK is refused up front.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from dfvg_dse.acceptance.dynamic import round_chunks, round_work
from dfvg_dse.costs import link_time, processor_forward_cost, round_link_bytes, tree_draft_time_s, tree_verify_cost
from dfvg_dse.specs import DecodeConfig, InputError, TreeSpec

CHUNK_ROUNDS = 4096  # rounds simulated at once: memory is set by this, not by `rounds`
MAX_SIM_WORK = 8e8  # sequence-rounds x work per sequence, about 30 s (docs/acceptance-and-trees.md, "Limits")


class SimResult(NamedTuple):
    tokens_per_s: float
    tokens_per_s_standard_error: float
    expected_tokens_per_round: float  # per sequence, sampled mean
    round_time_s: float
    j_per_token: float
    p50_time_per_token_s: float  # over output tokens: each token is charged its round's time / tokens
    p99_time_per_token_s: float
    p99_round_time_s: float
    draft_idle_fraction: float
    verify_idle_fraction: float
    wasted_draft_fraction: float  # of the drafter's busy time
    hit_rate: float
    rounds: int


def walk_tree(tree: TreeSpec, table: np.ndarray, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Sample the accepted path of n sequence-rounds: (accepted draft tokens, whether it is the
    rank-0 chain). Each level draws the target's rank for the sequences still accepting only."""
    ranks = max(tree.ranks) + 1
    keys = np.array(tree.parents[1:], dtype=np.int64) * ranks + np.array(tree.ranks[1:], dtype=np.int64)
    order = np.argsort(keys)  # child of (parent, rank) by binary search: memory O(nodes), not nodes x ranks
    sorted_keys = np.append(keys[order], -1)
    node, accepted = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    rank0 = np.ones(n, dtype=bool)
    live = np.arange(n)
    for depth in range(tree.depth):
        if live.size == 0:
            break
        cum = np.cumsum(table[depth, :ranks])
        pick = np.searchsorted(cum, rng.random(live.size), side="right")  # ranks: the target took no draft
        at = np.searchsorted(sorted_keys[:-1], node[live] * ranks + np.minimum(pick, ranks - 1))
        step = (pick < ranks) & (sorted_keys[at] == node[live] * ranks + pick)
        rank0[live] &= ~step | (pick == 0)
        live = live[step]
        accepted[live] += 1
        node[live] = order[at[step]] + 1
    return accepted, rank0


def _sample_chunks(config: DecodeConfig, rounds: int, seed: int, chunk: int):
    """Per chunk of rounds: mean accepted tokens + 1 per sequence, whether the overlap prediction hit
    for every sequence of the batch (each sequence walks its own tree), the level widths and ancestor
    pairs (one row for a static tree: its stage times are the same every round)."""
    profile, b = config.acceptance, config.batch
    chunk_rng = lambda i: np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0, i)))  # noqa: E731
    if config.tree is not None:
        tree = config.tree
        table = profile.matrix(tree.depth + 1, max(tree.ranks) + 1)
        chain = len(tree.rank0_path()) - 1
        widths = np.asarray(tree.level_widths(), dtype=float)[None, :]
        pairs = np.array([float(sum(d + 1 for d in tree.depths))])
        for i, start in enumerate(range(0, rounds, chunk)):
            n = min(chunk, rounds - start) * b
            rng = chunk_rng(i)
            accepted, rank0 = walk_tree(tree, table, n, rng)
            hit = rank0 & (accepted == chain) & (rng.random(n) < table[chain, 0])
            yield (accepted + 1.0).reshape(-1, b).mean(axis=1), hit.reshape(-1, b).all(axis=1), widths, pairs
        return
    draws = round_chunks(profile, config.dynamic, rounds * b, np.random.SeedSequence(seed, spawn_key=(1,)),
                         chunk_rounds=chunk * b)
    for i, est in enumerate(draws):
        rng = chunk_rng(i)  # the bonus draws; the dynamic sampler has its own streams (spawn key (1,))
        depth = (est.widths > 0).sum(axis=1)
        table = profile.matrix(est.widths.shape[1] + 1, 1)[:, 0]
        full = est.tokens - 1 == depth  # accepted all the way down (any ranks): the prediction's event
        hit = full & (rng.random(len(depth)) < table[np.minimum(depth, len(table) - 1)])
        widths = est.widths[::b].astype(float)  # the batch drafts one tree shape per round: the first sequence's
        pairs = 1.0 + (widths * (np.arange(widths.shape[1]) + 2)).sum(axis=1)
        yield est.tokens.reshape(-1, b).mean(axis=1), hit.reshape(-1, b).all(axis=1), widths, pairs


def _check_work(config: DecodeConfig, rounds: int, seed) -> None:
    """Refuse up front past MAX_SIM_WORK: rounds x batch sequence-rounds, each a tree walk (one unit
    per level) or a dynamic round (acceptance.dynamic.round_work)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"simulate: seed = {seed!r}: must be an integer >= 0")
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise InputError(f"simulate: rounds = {rounds!r}: must be an integer >= 1")
    if config.schedule == "ar":
        return
    per = config.tree.depth + 1 if config.tree is not None else round_work(config.acceptance, config.dynamic).work
    work = rounds * config.batch * per
    if work > MAX_SIM_WORK:
        raise InputError(f"simulate: {rounds:,} rounds x batch {config.batch} x {per:,} work units per sequence = "
                         f"{work:.1e}, past the {MAX_SIM_WORK:.2g} limit (about 30 s); use at most "
                         f"{max(1, int(MAX_SIM_WORK // (config.batch * per))):,} rounds")


class _Totals:
    """What the statistics need, summed chunk by chunk: totals, the co-moments of output tokens and
    cycle time (Chan et al.'s pairwise update) and histograms of the times."""

    def __init__(self) -> None:
        self.sums = dict.fromkeys(("tokens", "out", "cycle", "draft_busy", "verify_busy", "wasted", "hit",
                                   "energy"), 0.0)
        self.n, self.mean_o, self.mean_c, self.m_oo, self.m_cc, self.m_oc = 0, 0.0, 0.0, 0.0, 0.0, 0.0
        self.per_token, self.cycles = _Histogram(), _Histogram()

    def add(self, out: np.ndarray, cycle: np.ndarray, **sums: np.ndarray) -> None:
        for key, value in sums.items():
            self.sums[key] += float(np.sum(value))
        self.sums["out"] += float(out.sum())
        self.sums["cycle"] += float(cycle.sum())
        n, mo, mc = len(out), float(out.mean()), float(cycle.mean())
        do, dc, total = mo - self.mean_o, mc - self.mean_c, self.n + n
        w = self.n * n / total
        self.m_oo += float(np.sum((out - mo) ** 2)) + do * do * w
        self.m_cc += float(np.sum((cycle - mc) ** 2)) + dc * dc * w
        self.m_oc += float(np.sum((out - mo) * (cycle - mc))) + do * dc * w
        self.mean_o, self.mean_c, self.n = self.mean_o + do * n / total, self.mean_c + dc * n / total, total

    def ratio_standard_error(self) -> float:
        """Delta-method standard error of sum(out) / sum(cycle): std(out - ratio x cycle) / (sqrt(n) mean cycle)."""
        if self.n < 2:
            return 0.0
        r = self.mean_o / self.mean_c
        var = max(0.0, self.m_oo - 2 * r * self.m_oc + r * r * self.m_cc) / (self.n - 1)
        return math.sqrt(var) / (math.sqrt(self.n) * self.mean_c)


class _Histogram:
    """Weighted percentiles of a stream of times in log-spaced bins: relative resolution 1e-4
    between 1e-12 s and 1e6 s (values outside are clipped), a fixed 3 MB whatever the rounds."""

    LOG_LO, LOG_HI, PER_DECADE = -12.0, 6.0, 23026  # ln(10) / 1e-4 bins per decade

    def __init__(self) -> None:
        self.bins = int((self.LOG_HI - self.LOG_LO) * self.PER_DECADE)
        self.counts = np.zeros(self.bins)

    def add(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        index = np.clip(((np.log10(values) - self.LOG_LO) * self.PER_DECADE).astype(np.int64), 0, self.bins - 1)
        self.counts += np.bincount(index, weights=weights, minlength=self.bins)

    def percentile(self, q: float) -> float:
        """np.percentile's linear rule on the bin centres: between order statistics floor(h), floor(h) + 1."""
        cum = np.cumsum(self.counts)
        h = (cum[-1] - 1) * q / 100
        lo, frac = math.floor(h), h - math.floor(h)
        at = np.searchsorted(cum, [lo, min(lo + 1, cum[-1] - 1)], side="right")  # bins holding those ranks
        centre = 10 ** (self.LOG_LO + (at + 0.5) / self.PER_DECADE)
        return float(centre[0] + frac * (centre[1] - centre[0]))


def simulate(config: DecodeConfig, rounds: int = 100_000, seed: int = 0, *,
             chunk_rounds: int = CHUNK_ROUNDS) -> SimResult:
    """Simulate `rounds` rounds of a feasible design, `chunk_rounds` at a time (module docstring)."""
    _check_work(config, rounds, seed)
    system, b = config.system, config.batch
    t_ar = float(processor_forward_cost(config.target, system.verify, 1, config.context, b).time_s)
    if config.schedule == "ar":
        energy = system.verify.decode_power_w * t_ar
        return SimResult(b / t_ar, 0.0, 1.0, t_ar, energy / b, t_ar, t_ar, t_ar, 1.0, 0.0, 0.0, 0.0, rounds)
    totals = _Totals()
    first_d, pending = None, None
    for tokens, hit, widths, pairs in _sample_chunks(config, rounds, seed, chunk_rounds):
        times = _stage_times(config, tokens, widths, pairs)
        if first_d is None:
            first_d = times[0][:1]
        if pending is not None:  # a chunk's last round needs the next chunk's first draft time
            _account(config, totals, *pending, next_d=times[0][:1], t_ar=t_ar)
        pending = (tokens, hit, *times)
    _account(config, totals, *pending, next_d=first_d, t_ar=t_ar)  # the last round wraps to the first draft
    sums, total_time = totals.sums, totals.sums["cycle"]
    same = system.draft.name == system.verify.name
    return SimResult(
        tokens_per_s=sums["out"] / total_time, tokens_per_s_standard_error=totals.ratio_standard_error(),
        expected_tokens_per_round=sums["tokens"] / rounds, round_time_s=total_time / rounds,
        j_per_token=sums["energy"] / sums["out"],
        p50_time_per_token_s=totals.per_token.percentile(50), p99_time_per_token_s=totals.per_token.percentile(99),
        p99_round_time_s=totals.cycles.percentile(99),
        draft_idle_fraction=float(1.0 - min(1.0, sums["draft_busy"] / total_time)) if not same else 0.0,
        verify_idle_fraction=float(max(0.0, 1.0 - (sums["verify_busy"] + (sums["draft_busy"] if same else 0))
                                       / total_time)),
        wasted_draft_fraction=sums["wasted"] / sums["draft_busy"] if sums["draft_busy"] else 0.0,
        hit_rate=sums["hit"] / rounds, rounds=rounds)


def _stage_times(config: DecodeConfig, tokens: np.ndarray, widths: np.ndarray, pairs: np.ndarray):
    """Per round of a chunk: draft time, verify time, link time and link energy (from costs/)."""
    system, b, n = config.system, config.batch, len(tokens)
    nodes = widths.sum(axis=1)
    # a head's first step re-reads the tokens the previous round accepted: this round's, in the mean
    d = np.broadcast_to(tree_draft_time_s(config.draft, system.draft, widths, config.context, b,
                                          np.mean(tokens))[0], (n,))
    v = np.broadcast_to(tree_verify_cost(config.target, system.verify, nodes, pairs, config.context, b,
                                         config.attention_efficiency).time_s, (n,))
    down_b, up_b = round_link_bytes(np.broadcast_to(nodes, (n,)), tokens, config.record_bytes, b,
                                    config.draft.vocab_size if config.send_draft_probs else 0,
                                    config.draft.feature_bytes_per_token)
    if system.link is None:
        return d, v, np.zeros(n), 0.0
    down, up = link_time(system.link, down_b), link_time(system.link, up_b)
    sync = config.sync_s if system.link.path == "host-staged" else 0.0
    return d, v, down.time_s + up.time_s + sync, float(np.sum(down.energy_j + up.energy_j))


def _account(config: DecodeConfig, totals: _Totals, tokens, hit, d, v, t_link, link_energy, next_d, t_ar) -> None:
    """The timeline of a chunk's rounds, event by event: the tree after round k leaves the drafter at
    max(its draft done, verdict k) after a hit, at verdict k + its draft time after a miss (or
    always, sequentially). Its cycle, busy times and energy go into the totals."""
    system, b = config.system, config.batch
    d_next = np.concatenate([d[1:], next_d])  # the next tree's draft time
    t_link = np.broadcast_to(t_link, d.shape)
    verdict = t_link + v  # after the tree is sent
    overlap = config.schedule == "overlap"
    hit_now = hit if overlap else np.zeros(len(hit), dtype=bool)
    wasted = np.where(overlap & ~hit_now, np.minimum(d_next, verdict), 0.0)
    cycle = np.where(hit_now, np.maximum(d_next, verdict), verdict + d_next)
    draft_busy = d_next + wasted
    fill = np.maximum(0.0, cycle - v) if (overlap and config.gpu_fill) else np.zeros(len(cycle))
    out_tokens = b * tokens + b * fill / t_ar
    verify_busy = v + fill
    if system.draft.name == system.verify.name:
        e_dev = (system.verify.decode_power_w * np.minimum(cycle, draft_busy + verify_busy)
                 + system.verify.idle_power_w * np.maximum(0.0, cycle - draft_busy - verify_busy))
    else:
        e_dev = (system.draft.decode_power_w * draft_busy + system.draft.idle_power_w * (cycle - draft_busy)
                 + system.verify.decode_power_w * verify_busy
                 + system.verify.idle_power_w * np.maximum(0.0, cycle - verify_busy))
    totals.add(out_tokens, cycle, tokens=tokens, draft_busy=draft_busy, verify_busy=verify_busy, wasted=wasted,
               hit=hit, energy=np.append(e_dev, link_energy))
    # each output token is charged its round's time per token
    totals.per_token.add(cycle / (out_tokens / b), np.maximum(1, np.round(out_tokens / b)))
    totals.cycles.add(cycle)
