"""What one round drafts and costs: tree shape, expected tokens, hit probability, stage times.

Draft time D = sum over levels i = 0..depth-1 of one draft forward over the w_i nodes of level i
(w_0 = 1, the root): drafting level i + 1 runs the draft model on level i. Verify time V is one
target forward over the root and every draft node, with the tree's ancestor pairs for attention.
Link: `record_bytes` per draft token down (plus Q over the vocabulary for stochastic
verification) and the verdict (one record per accepted token and the bonus) up, each a transfer
on the link, plus the host synchronisation of host-staged paths.

The overlap schedule predicts that the round accepts the rank-0 path in full and that the
target's bonus token is the draft's next top-1 token; `hit_probability` is that event's
probability. For dynamic trees the shape is the expected one (fractional widths) and the hit uses
the expected depth: an approximation whose error the simulator reports.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.acceptance import expected_tokens, simulate_adapt, simulate_duodecoding, simulate_eagle2
from dfvg_dse.costs import device_forward_cost, link_time, processor_forward_cost
from dfvg_dse.specs import AdaptRule, DecodeConfig, DuoRule, TreeSpec


class RoundShape(NamedTuple):
    widths: np.ndarray  # expected draft nodes per level 1..depth
    expected_tokens: float  # F per sequence, bonus included
    tree_pairs: float  # sum over verified nodes (root included) of ancestors + 1
    hit_probability: float
    exact: bool
    dynamic: object  # the DynamicEstimate behind a dynamic rule, else None


def rank0_chain_length(tree: TreeSpec) -> int:
    """Depth of the all-rank-0 path from the root."""
    child = {(p, r): i for i, (p, r) in enumerate(zip(tree.parents, tree.ranks)) if i}
    node, length = 0, 0
    while (node, 0) in child:
        node, length = child[(node, 0)], length + 1
    return length


def hit_probability(config: DecodeConfig, chain_length: int) -> float:
    """P(the rank-0 path of `chain_length` tokens is accepted and the bonus token is the draft's top-1)."""
    table = config.acceptance.matrix(chain_length + 1, 1)[:, 0]
    return float(np.prod(table))


def round_shape(config: DecodeConfig, rounds: int = 20000, seed: int = 0) -> RoundShape:
    """The round's expected shape for a static tree (exact) or a dynamic rule (Monte Carlo)."""
    if config.tree is not None:
        tree = config.tree
        return RoundShape(np.asarray(tree.level_widths(), dtype=float), expected_tokens(tree, config.acceptance),
                          float(sum(d + 1 for d in tree.depths)), hit_probability(config, rank0_chain_length(tree)),
                          True, None)
    rule = config.dynamic
    if isinstance(rule, AdaptRule):
        est = simulate_adapt(config.acceptance, rule, rounds, seed)
    elif isinstance(rule, DuoRule):
        est = simulate_duodecoding(config.acceptance, rule, rounds, seed)
    else:
        est = simulate_eagle2(config.acceptance, rule, rounds, seed)
    widths = np.asarray(est.nodes_per_level, dtype=float)
    pairs = 1.0 + float(np.sum(widths * (np.arange(len(widths)) + 2)))
    depth = int(round(est.expected_depth))
    return RoundShape(widths, est.expected_tokens, pairs, hit_probability(config, depth), est.method == "exact", est)


class StageTimes(NamedTuple):
    draft_s: float  # D
    draft_bound: str
    verify_s: float  # V
    verify_bound: str
    down_bytes: float
    up_bytes: float
    down_s: float
    up_s: float
    sync_s: float
    link_bound: str
    link_energy_j: float
    ar_step_s: float  # target alone, one token per sequence, on the verify device
    ar_bound: str


def draft_time_s(config: DecodeConfig, widths) -> tuple[np.ndarray, np.ndarray]:
    """Draft time of rounds with the given level widths (..., levels) and the bound of the widest step."""
    widths = np.atleast_1d(np.asarray(widths, dtype=float))
    if widths.shape[-1] == 0:
        return np.zeros(widths.shape[:-1]), np.array("memory")
    frontier = np.concatenate([np.ones(widths.shape[:-1] + (1,)), widths[..., :-1]], axis=-1)  # w_0 .. w_{D-1}
    level = np.arange(frontier.shape[-1])
    live = frontier > 0
    cost = device_forward_cost(config.draft, config.system.draft, np.where(live, frontier, 1.0),
                               config.context + level, config.batch)
    times = np.where(live, cost.time_s, 0.0).sum(axis=-1)
    return times, cost.bound_name[..., 0]


def verify_time_s(config: DecodeConfig, draft_nodes, tree_pairs):
    """Target forward over the root and the draft nodes (arrays broadcast); GPUs and CPUs verify."""
    return processor_forward_cost(config.target, config.system.verify, 1.0 + np.asarray(draft_nodes, dtype=float),
                                  config.context, config.batch, tree_pairs, config.attention_efficiency)


def link_bytes(config: DecodeConfig, draft_nodes, expected_tokens) -> tuple[np.ndarray, np.ndarray]:
    """Bytes down (tree records, plus Q for stochastic verification) and up (the verdict)."""
    per_token = config.record_bytes + (2.0 * config.draft.vocab_size if config.send_draft_probs else 0.0)
    down = config.batch * np.asarray(draft_nodes, dtype=float) * per_token
    up = config.batch * np.asarray(expected_tokens, dtype=float) * config.record_bytes
    return down, up


def stage_times(config: DecodeConfig, shape: RoundShape) -> StageTimes:
    """Expected stage times of one round (model.md §6)."""
    ar = processor_ar(config)
    if config.schedule == "ar":
        return StageTimes(0.0, "-", 0.0, "-", 0.0, 0.0, 0.0, 0.0, 0.0, "-", 0.0, float(ar.time_s), str(ar.bound_name))
    nodes = float(shape.widths.sum())
    d, d_bound = draft_time_s(config, shape.widths)
    v = verify_time_s(config, nodes, shape.tree_pairs)
    down, up = link_bytes(config, nodes, shape.expected_tokens)
    link = config.system.link
    if link is None:
        return StageTimes(float(d), str(d_bound), float(v.time_s), str(v.bound_name), 0.0, 0.0, 0.0, 0.0, 0.0, "-",
                          0.0, float(ar.time_s), str(ar.bound_name))
    t_down, t_up = link_time(link, down), link_time(link, up)
    sync = config.sync_s if link.path == "host-staged" else 0.0
    bound = "latency" if float(t_down.latency_time_s) >= float(t_down.transfer_time_s) else "bandwidth"
    return StageTimes(float(d), str(d_bound), float(v.time_s), str(v.bound_name), float(down), float(up),
                      float(t_down.time_s), float(t_up.time_s), sync, bound,
                      float(t_down.energy_j + t_up.energy_j), float(ar.time_s), str(ar.bound_name))


def processor_ar(config: DecodeConfig):
    """Autoregressive decode of the target on the verify device: one token per sequence per step."""
    return processor_forward_cost(config.target, config.system.verify, 1, config.context, config.batch)
