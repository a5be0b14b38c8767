"""What one round drafts and costs: tree shape, expected tokens, hit probability, stage times
(the stage costs themselves are in costs/stages.py, shared with the simulator).

A profile that carries a teacher-forced trace (specs.AcceptanceTrace) gives a static tree's
expected tokens and hit probability by replaying it (acceptance/replay.py), not from the profile's
independent-round statistics.

The overlap schedule predicts that the round accepts the rank-0 path in full and that the
target's bonus token is the draft's next top-1 token; `hit_probability` is that event's
probability. For dynamic trees the shape is the expected one (fractional widths) and the hit uses
the expected depth: an approximation whose error the simulator reports.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.acceptance import (can_replay, expected_tokens, replay, replay_adapt, simulate_adapt,
                                 simulate_duodecoding, simulate_eagle2)
from dfvg_dse.costs import link_time, processor_forward_cost, round_link_bytes, tree_draft_time_s, tree_verify_cost
from dfvg_dse.specs import AcceptanceProfile, AdaptRule, DecodeConfig, DuoRule, TreeSpec


class RoundShape(NamedTuple):
    widths: np.ndarray  # expected draft nodes per level 1..depth
    expected_tokens: float  # F per sequence, bonus included
    hit_probability: float
    exact: bool
    sample_widths: np.ndarray  # (samples, levels): one row for a static tree, one per round for a dynamic rule
    sample_pairs: np.ndarray  # (samples,): sum over verified nodes (root included) of ancestors + 1
    sample_tokens: np.ndarray | None = None  # a dynamic rule's Monte Carlo: tokens per round (bonus included)


def rank0_chain_length(tree: TreeSpec) -> int:
    """Depth of the all-rank-0 path from the root."""
    return len(tree.rank0_path()) - 1


def hit_probability(config: DecodeConfig, chain_length: int) -> float:
    """P(the rank-0 path of `chain_length` tokens is accepted and the bonus token is the draft's top-1)."""
    return profile_hit_probability(config.acceptance, chain_length)


def profile_hit_probability(profile: AcceptanceProfile, chain_length: int) -> float:
    """hit_probability from a profile's depth x rank statistics."""
    return float(np.prod(profile.matrix(chain_length + 1, 1)[:, 0]))


def static_tokens_and_hit(tree: TreeSpec, profile: AcceptanceProfile) -> tuple[float, float]:
    """Expected tokens per round (bonus included) and overlap hit probability of a static tree:
    replayed from the profile's trace when it has one (measured text: bursts and run ends
    included), else from its statistics."""
    if can_replay(tree, profile.trace):
        tokens, hit, _ = replay(tree, profile.trace)
        return tokens, hit
    return expected_tokens(tree, profile), profile_hit_probability(profile, rank0_chain_length(tree))


def round_shape(config: DecodeConfig, rounds: int = 20000, seed: int = 0) -> RoundShape:
    """The round's shape for a static tree (exact) or a dynamic rule (Monte Carlo over rounds).

    For a dynamic rule the overlap prediction is "every drafted level accepted, and the bonus
    agrees": its probability is the sampled full-acceptance rate times the bonus probability.
    """
    if config.tree is not None:
        tree = config.tree
        widths = np.asarray(tree.level_widths(), dtype=float)
        tokens, hit = static_tokens_and_hit(tree, config.acceptance)
        pairs = np.array([float(sum(d + 1 for d in tree.depths))])
        return RoundShape(widths, tokens, hit, True, widths[None, :], pairs)
    rule = config.dynamic
    if can_replay(rule, config.acceptance.trace):  # ADAPT against measured text (approximate off the path)
        replayed = replay_adapt(rule, config.acceptance.trace, seed)
        sample = replayed.widths
        return RoundShape(sample.mean(axis=0), replayed.tokens_per_round, replayed.hit_rate, False, sample,
                          _ancestor_pairs(sample))
    # TODO(#12): per-round widths are kept for the stage-time sample (rounds x levels, capped by the
    # Monte Carlo's work limit, up to ~820 MB at the cap); stream stage times per chunk instead.
    if isinstance(rule, AdaptRule):
        est = simulate_adapt(config.acceptance, rule, rounds, seed, keep_rounds=True)
    elif isinstance(rule, DuoRule):
        est = simulate_duodecoding(config.acceptance, rule, rounds, seed, keep_rounds=True)
    else:
        est = simulate_eagle2(config.acceptance, rule, rounds, seed, keep_rounds=True)
    sample = est.round_widths
    depth = (sample > 0).sum(axis=1)
    bonus = config.acceptance.matrix(sample.shape[1] + 1, 1)[:, 0][depth]
    hit = float(np.mean((est.round_tokens - 1 == depth) * bonus))
    return RoundShape(np.asarray(est.nodes_per_level, dtype=float), est.expected_tokens, hit, est.method == "exact",
                      sample, _ancestor_pairs(sample), np.asarray(est.round_tokens, dtype=float))


def _ancestor_pairs(widths: np.ndarray) -> np.ndarray:
    """Per round (row of level widths): the root's 1 plus, for a node at level l, its l + 1 visible
    tokens (itself and its ancestors, root included)."""
    return 1.0 + (widths * (np.arange(widths.shape[1]) + 2)).sum(axis=1)


class StageTimes(NamedTuple):
    """Stage times; the draft, verify and link times are arrays over the shape's samples."""

    draft_s: np.ndarray  # D
    draft_bound: str
    verify_s: np.ndarray  # V
    verify_bound: str
    down_bytes: float  # means
    up_bytes: float
    down_s: np.ndarray
    up_s: np.ndarray
    sync_s: float
    link_bound: str
    link_energy_j: float  # mean per round
    ar_step_s: float  # target alone, one token per sequence, on the verify device
    ar_bound: str


def stage_times(config: DecodeConfig, shape: RoundShape) -> StageTimes:
    """Stage times of one round (docs/pipeline.md, "One round"), per sample of the round's shape."""
    ar = processor_ar(config)
    zero = np.zeros(1)
    if config.schedule == "ar":
        return StageTimes(zero, "-", zero, "-", 0.0, 0.0, zero, zero, 0.0, "-", 0.0, float(ar.time_s),
                          str(ar.bound_name))
    nodes = shape.sample_widths.sum(axis=1)
    d, d_bound = tree_draft_time_s(config.draft, config.system.draft, shape.sample_widths, config.context,
                                   config.batch, shape.expected_tokens)
    v = tree_verify_cost(config.target, config.system.verify, nodes, shape.sample_pairs, config.context, config.batch,
                         config.attention_efficiency)
    down, up = round_link_bytes(nodes, shape.expected_tokens, config.record_bytes, config.batch,
                                config.draft.vocab_size if config.send_draft_probs else 0,
                                config.draft.feature_bytes_per_token)
    common = (np.asarray(d, dtype=float), str(np.ravel(d_bound)[0]), np.asarray(v.time_s, dtype=float),
              str(np.ravel(v.bound_name)[0]), float(np.mean(down)), float(np.mean(up)))
    link = config.system.link
    if link is None:
        return StageTimes(*common, zero, zero, 0.0, "-", 0.0, float(ar.time_s), str(ar.bound_name))
    t_down, t_up = link_time(link, down), link_time(link, up)
    sync = config.sync_s if link.path == "host-staged" else 0.0
    bound = "latency" if float(np.mean(t_down.latency_time_s)) >= float(np.mean(t_down.transfer_time_s)) else "bandwidth"
    return StageTimes(*common, np.asarray(t_down.time_s, float), np.asarray(t_up.time_s, float), sync, bound,
                      float(np.mean(t_down.energy_j + t_up.energy_j)), float(ar.time_s), str(ar.bound_name))


def processor_ar(config: DecodeConfig):
    """Autoregressive decode of the target on the verify device: one token per sequence per step."""
    return processor_forward_cost(config.target, config.system.verify, 1, config.context, config.batch)
