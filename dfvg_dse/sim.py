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
device and the share of wasted draft work. Seeded; vectorised except the event loop.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from dfvg_dse.acceptance import simulate_adapt, simulate_duodecoding, simulate_eagle2
from dfvg_dse.costs import link_time, processor_forward_cost, round_link_bytes, tree_draft_time_s, tree_verify_cost
from dfvg_dse.specs import AdaptRule, DecodeConfig, DuoRule, TreeSpec


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


def _walk_tree(tree: TreeSpec, table: np.ndarray, rounds: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Sample the accepted path of each round: (accepted draft tokens, whether it is the rank-0 chain)."""
    ranks = max(tree.ranks) + 1
    child = -np.ones((tree.n_nodes, ranks), dtype=int)
    for i in range(1, tree.n_nodes):
        child[tree.parents[i], tree.ranks[i]] = i
    node = np.zeros(rounds, dtype=int)
    accepted = np.zeros(rounds, dtype=int)
    rank0 = np.ones(rounds, dtype=bool)
    alive = np.ones(rounds, dtype=bool)
    for depth in range(tree.depth):
        cum = np.cumsum(table[depth, :ranks])
        u = rng.random(rounds)
        pick = np.where(u < cum[-1], np.argmax(u[:, None] < cum[None, :], axis=1), -1)
        nxt = np.where(pick >= 0, child[node, np.maximum(pick, 0)], -1)
        step = alive & (nxt >= 0)
        rank0 &= ~step | (pick == 0)
        accepted += step
        node = np.where(step, nxt, node)
        alive = step
    return accepted, rank0


def _rank0_length(tree: TreeSpec) -> int:
    node, length = 0, 0
    while True:
        kids = [i for i in range(1, tree.n_nodes) if tree.parents[i] == node and tree.ranks[i] == 0]
        if not kids:
            return length
        node, length = kids[0], length + 1


def _sample_rounds(config: DecodeConfig, rounds: int, rng):
    """Per round: mean accepted tokens + 1 per sequence, whether the overlap prediction hit for every
    sequence of the batch (each sequence walks its own tree), the level widths and ancestor pairs."""
    profile, b = config.acceptance, config.batch
    n = rounds * b
    if config.tree is not None:
        tree = config.tree
        table = profile.matrix(tree.depth + 1, max(tree.ranks) + 1)
        accepted, rank0 = _walk_tree(tree, table, n, rng)
        chain = _rank0_length(tree)
        bonus = rng.random(n) < table[chain, 0] if chain < table.shape[0] else np.zeros(n, bool)
        hit = rank0 & (accepted == chain) & bonus
        widths = np.broadcast_to(np.asarray(tree.level_widths(), dtype=float), (rounds, tree.depth))
        pairs = np.full(rounds, float(sum(d + 1 for d in tree.depths)))
        tokens = accepted + 1.0
    else:
        rule, seed = config.dynamic, int(rng.integers(2**31))
        if isinstance(rule, AdaptRule):
            est = simulate_adapt(profile, rule, n, seed)
        elif isinstance(rule, DuoRule):
            est = simulate_duodecoding(profile, rule, n, seed)
        else:
            est = simulate_eagle2(profile, rule, n, seed)
        depth = (est.round_widths > 0).sum(axis=1)
        table = profile.matrix(est.round_widths.shape[1] + 1, 1)[:, 0]
        full = est.round_tokens - 1 == depth  # accepted all the way down (any ranks): the prediction's event
        hit = full & (rng.random(n) < table[np.minimum(depth, len(table) - 1)])
        widths = est.round_widths[::b]  # the batch drafts one tree shape per round: the first sequence's
        pairs = 1.0 + (widths * (np.arange(widths.shape[1]) + 2)).sum(axis=1)
        tokens = est.round_tokens
    return tokens.reshape(rounds, b).mean(axis=1), hit.reshape(rounds, b).all(axis=1), widths, pairs


def simulate(config: DecodeConfig, rounds: int = 100_000, seed: int = 0) -> SimResult:
    """Simulate `rounds` rounds of a feasible design."""
    rng = np.random.default_rng(seed)
    system, b = config.system, config.batch
    t_ar = float(processor_forward_cost(config.target, system.verify, 1, config.context, b).time_s)
    if config.schedule == "ar":
        energy = system.verify.decode_power_w * t_ar
        return SimResult(b / t_ar, 0.0, 1.0, t_ar, energy / b, t_ar, t_ar, t_ar, 1.0, 0.0, 0.0, 0.0, rounds)
    tokens, hit, widths, pairs = _sample_rounds(config, rounds, rng)
    nodes = widths.sum(axis=1)
    d = tree_draft_time_s(config.draft, system.draft, widths, config.context, b)[0]
    v = tree_verify_cost(config.target, system.verify, nodes, pairs, config.context, b,
                         config.attention_efficiency).time_s
    down_b, up_b = round_link_bytes(nodes, tokens, config.record_bytes, b,
                                    config.draft.vocab_size if config.send_draft_probs else 0)
    if system.link is not None:
        down, up = link_time(system.link, down_b), link_time(system.link, up_b)
        sync = config.sync_s if system.link.path == "host-staged" else 0.0
        t_link = down.time_s + up.time_s + sync
        link_energy = float(np.sum(down.energy_j + up.energy_j))
    else:
        t_link, link_energy = np.zeros(rounds), 0.0
    cycle, draft_busy, wasted = np.empty(rounds), np.empty(rounds), np.zeros(rounds)
    overlap = config.schedule == "overlap"
    send = 0.0
    for k in range(rounds):  # event loop: when does the tree after round k leave the drafter?
        verdict = send + t_link[k] + v[k]
        nxt = (k + 1) % rounds  # the next tree's draft time (wrapping keeps every sample used once)
        if not overlap:
            following = verdict + d[nxt]
            draft_busy[k] = d[nxt]
        elif hit[k]:
            following = max(send + d[nxt], verdict)
            draft_busy[k] = d[nxt]
        else:
            wasted[k] = min(d[nxt], verdict - send)
            following = verdict + d[nxt]
            draft_busy[k] = wasted[k] + d[nxt]
        cycle[k] = following - send
        send = following
    fill = np.maximum(0.0, cycle - v) if (overlap and config.gpu_fill) else np.zeros(rounds)
    out_tokens = b * tokens + b * fill / t_ar
    verify_busy = v + fill
    same = system.draft.name == system.verify.name
    if same:
        e_dev = (system.verify.decode_power_w * np.minimum(cycle, draft_busy + verify_busy)
                 + system.verify.idle_power_w * np.maximum(0.0, cycle - draft_busy - verify_busy))
    else:
        e_dev = (system.draft.decode_power_w * draft_busy + system.draft.idle_power_w * (cycle - draft_busy)
                 + system.verify.decode_power_w * verify_busy
                 + system.verify.idle_power_w * np.maximum(0.0, cycle - verify_busy))
    total_time = cycle.sum()
    per_token = np.repeat(cycle / (out_tokens / b), np.maximum(1, np.round(out_tokens / b).astype(int)))
    ratio = out_tokens.sum() / cycle.sum()
    return SimResult(
        tokens_per_s=float(out_tokens.sum() / total_time),
        # ratio estimator: the delta method's standard error of sum(tokens) / sum(cycle)
        tokens_per_s_standard_error=float(np.std(out_tokens - ratio * cycle, ddof=1)
                                          / (math.sqrt(rounds) * cycle.mean())),
        expected_tokens_per_round=float(tokens.mean()), round_time_s=float(cycle.mean()),
        j_per_token=float((e_dev.sum() + link_energy) / out_tokens.sum()),
        p50_time_per_token_s=float(np.percentile(per_token, 50)), p99_time_per_token_s=float(np.percentile(per_token, 99)),
        p99_round_time_s=float(np.percentile(cycle, 99)),
        draft_idle_fraction=float(1.0 - min(1.0, draft_busy.sum() / total_time)) if not same else 0.0,
        verify_idle_fraction=float(max(0.0, 1.0 - (verify_busy.sum() + (draft_busy.sum() if same else 0)) / total_time)),
        wasted_draft_fraction=float(wasted.sum() / draft_busy.sum()) if draft_busy.sum() else 0.0,
        hit_rate=float(hit.mean()), rounds=rounds)
