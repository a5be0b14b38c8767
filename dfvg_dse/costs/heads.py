"""Parameters and traffic of draft heads (issue 18; specs/drafter.py names the kinds).

Counts follow the tensors each kind's checkpoint stores (EAGLE's and vLLM's module layouts; tests
enumerate them tensor by tensor): what the head stores, what one drafted token multiplies by (its
own LM head, or the target's it shares), and the target hidden states it reads per token, which
cross the link when the head drafts on another device than the target verifies on.
"""

from __future__ import annotations

from typing import NamedTuple

from dfvg_dse.costs.work import _layer_counts, param_counts
from dfvg_dse.specs.drafter import FEATURE_BYTES_PER_VALUE, HeadSpec, one_layer_of


class HeadCounts(NamedTuple):
    """Parameter counts of a draft head (numbers of values)."""

    stored: int  # the head's own tensors, as its checkpoint holds them
    own_head: int  # its own LM head(s), d x rows, within `stored` (EAGLE-3's draft vocabulary; Medusa's k heads)
    shared_head: int  # the target's LM head it drafts through every step (stored by the target, not by it)
    matmul_per_step: int  # weights one drafted token multiplies by: projections, layers, LM head(s)
    feature_values: int  # target hidden-state values it reads per drafted position (Medusa: per round)


def _eagle_counts(head: HeadSpec) -> HeadCounts:
    d, layer = head.d_model, head.layer
    layer_matmul, layer_all = _layer_counts(layer)
    inputs = (2 if head.kind == "eagle" else head.feature_layers) * d  # [embedding; feature] or k fused features
    fc = inputs * d + (d if head.fc_bias else 0)
    layers_all, layers_matmul = layer.n_layers * layer_all, layer.n_layers * layer_matmul
    if head.kind == "eagle":  # EAGLE drops the first layer's input norm; no final norm
        layers_all -= d
        own = head.draft_vocab * d
    else:  # EAGLE-3: q, k and v of the first layer read [embedding; fused feature], 2d wide; a norm for
        # the second half, a final norm, and an LM head of its own
        qkv_second_half = d * (layer.n_heads + 2 * layer.n_kv_heads) * layer.head_dim
        layers_all += qkv_second_half + 2 * d
        layers_matmul += qkv_second_half
        own = (head.draft_vocab or head.target.vocab_size) * d
    shared = 0 if own else head.target.vocab_size * d
    return HeadCounts(stored=fc + layers_all + own, own_head=own, shared_head=shared,
                      matmul_per_step=inputs * d + layers_matmul + own + shared,
                      feature_values=head.feature_values)


def _medusa_counts(head: HeadSpec) -> HeadCounts:
    d, vocab = head.d_model, head.target.vocab_size
    blocks_matmul = head.medusa_layers * d * d
    blocks_all = head.medusa_layers * (d * d + (d if head.fc_bias else 0))
    own = head.medusa_heads * d * vocab
    return HeadCounts(stored=head.medusa_heads * blocks_all + own, own_head=own, shared_head=0,
                      matmul_per_step=head.medusa_heads * blocks_matmul + own, feature_values=head.feature_values)


def _mtp_counts(head: HeadSpec) -> HeadCounts:
    """DeepSeek-V3's module: its checkpoint stores copies of the embedding and head (counted in
    `stored`, as the model card's 14B does); serving shares the target's."""
    target = head.target
    if not target.mtp_layers:
        raise ValueError(f"{target.name} has no multi-token-prediction module (num_nextn_predict_layers = 0)")
    counts, d = param_counts(target), target.d_model
    # one token's weights of the module's layer (a MoE layer: attention, router, shared and its k
    # experts) and of the shared head: those of the target's last layer as a one-layer model
    layer_and_head = param_counts(one_layer_of(target)).active_matmul
    return HeadCounts(stored=counts.mtp // target.mtp_layers, own_head=0, shared_head=counts.head,
                      matmul_per_step=2 * d * d + layer_and_head, feature_values=head.feature_values)


def head_param_counts(head: HeadSpec) -> HeadCounts:
    """Exact parameter counts of a draft head."""
    if head.kind == "medusa":
        return _medusa_counts(head)
    if head.kind == "mtp":
        return _mtp_counts(head)
    return _eagle_counts(head)


def features_up_bytes(head: HeadSpec, accepted_tokens) -> float:
    """Bytes of target hidden states a round sends the head: the features of every token the round
    accepted (each drafted position conditions on them; EAGLE-3: 3 x d x 2 B each), or, for Medusa,
    which drafts from the last position alone, one hidden state."""
    values = head_param_counts(head).feature_values
    positions = 1.0 if head.kind == "medusa" else accepted_tokens
    return positions * values * FEATURE_BYTES_PER_VALUE
