"""Stage costs of one speculative round, shared by the closed-form pipeline and the simulator.

Draft time D = sum over levels i = 0..depth-1 of one draft forward over the w_i nodes of level i
(w_0 = 1, the root; for a feature head the tokens the last round accepted, rereads_accepted_tokens):
drafting level i + 1 runs the draft model on level i (Medusa's heads draft every
level in one forward on the root; a lookup drafter searches each sequence's context once on the host
CPU, `lookup_s_per_round` + `lookup_s_per_context_token` x context); plus the draft device's
fixed per-round work (`draft_round_overhead_s`, 0 unless calibrated). Verify time V is one
target forward over the root and every draft node, with the tree's ancestor pairs for attention,
plus the verifier's fixed per-round work (`verify_round_overhead_s`, 0 unless calibrated).
Link bytes: `record_bytes` per draft token down (plus Q over the vocabulary in fp16 when
verification is stochastic) and one record per accepted token up.
"""

from __future__ import annotations

import numpy as np

from dfvg_dse.costs.forward import device_forward_cost
from dfvg_dse.costs.processor import processor_forward_cost
from dfvg_dse.costs.roofline import ForwardCost
from dfvg_dse.specs import DeviceSpec, ModelSpec


def rereads_accepted_tokens(model: ModelSpec) -> bool:
    """A feature head (EAGLE, EAGLE-3, an MTP module) starts each round with one forward over the
    tokens the last verification accepted, whose target features it now has (EAGLE's draft step re-runs
    them); a draft model has cached its own accepted drafts, and Medusa reads one hidden state."""
    return bool(model.feature_bytes_per_token) and not model.drafts_in_one_pass


def tree_draft_time_s(model: ModelSpec, device: DeviceSpec, widths, context: int, batch: int = 1,
                      accepted_tokens=1.0):
    """Draft time of rounds with level widths `widths` (..., levels); returns (seconds, bound of step 0).
    `accepted_tokens` (per round, broadcast over the leading axes): the first step's rows for a head
    that re-reads them (rereads_accepted_tokens); one row for any other drafter."""
    widths = np.atleast_1d(np.asarray(widths, dtype=float))
    if widths.shape[-1] == 0:
        return np.zeros(widths.shape[:-1]), np.array("memory")
    first = np.broadcast_to(np.asarray(accepted_tokens if rereads_accepted_tokens(model) else 1.0, dtype=float),
                            widths.shape[:-1])[..., None]
    frontier = np.concatenate([first, widths[..., :-1]], axis=-1)  # w_0 .. w_{D-1}
    live = widths > 0  # step i drafts level i + 1: it runs only if that level has nodes (rows may be padded)
    if model.drafts_by_lookup:  # the host CPU searches each sequence's context once a round; no forward
        seconds = batch * (model.lookup_s_per_round + model.lookup_s_per_context_token * np.asarray(context, float))
        return np.where(live.any(axis=-1), seconds, 0.0), np.array("lookup")
    if model.drafts_in_one_pass:  # Medusa: every head at once, one forward on the root's hidden state
        frontier, live = frontier[..., :1], live.any(axis=-1, keepdims=True)
    cost = device_forward_cost(model, device, np.where(frontier > 0, frontier, 1.0),
                               context + np.arange(frontier.shape[-1]),
                               batch)
    per_round = np.where(live.any(axis=-1), device.draft_round_overhead_s, 0.0)
    return np.where(live, cost.time_s, 0.0).sum(axis=-1) + per_round, cost.bound_name[..., 0]


def tree_verify_cost(model: ModelSpec, device: DeviceSpec, draft_nodes, tree_pairs, context: int, batch: int = 1,
                     attention_efficiency: float = 1.0) -> ForwardCost:
    """One target forward over the root and `draft_nodes` draft tokens (GPU or CPU verifier), plus the
    verifier's fixed work per round (`verify_round_overhead_s`, 0 unless calibrated)."""
    cost = processor_forward_cost(model, device, 1.0 + np.asarray(draft_nodes, dtype=float), context, batch,
                                  tree_pairs, attention_efficiency)
    if not device.verify_round_overhead_s:
        return cost
    per_round = np.broadcast_to(device.verify_round_overhead_s, np.shape(cost.time_s))
    return cost._replace(time_s=cost.time_s + per_round, overhead_time_s=cost.overhead_time_s + per_round)


def round_link_bytes(draft_nodes, accepted_tokens, record_bytes: int, batch: int = 1,
                     draft_vocab: int = 0, feature_bytes: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Bytes down (records, plus fp16 Q over `draft_vocab` tokens if nonzero) and up (the verdict,
    plus `feature_bytes` of target hidden states per accepted token for a draft head)."""
    per_token = record_bytes + 2.0 * draft_vocab
    return (batch * np.asarray(draft_nodes, dtype=float) * per_token,
            batch * np.asarray(accepted_tokens, dtype=float) * (record_bytes + feature_bytes))
