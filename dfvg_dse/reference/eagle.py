"""An EAGLE-style draft head in the reference engine (issue 18, Deliver 5; the head of
models/reference/eagle, trained by models/reference/train_head.py).

At position p the head reads the target's feature f_{p-1} (the final-norm hidden state, the LM
head's input) and the embedding of token x_p: fc([embed(x_p); f_{p-1}]) + bias, one llama decoder
layer and its own final norm predict f_p, and the target's LM head turns the prediction into the
logits of x_{p+1}. A drafted node's row reads its parent row's prediction instead, as EAGLE drafts
beyond the verified text. The target's features reach the drafter with every verdict (the
verifier's `features`): the root row and each accepted node's, float16, d x 2 bytes each, over the
link like the token records (speculative.py, stages.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dfvg_dse.reference.tiny_lm import KVCache, PackedWeights, ReferenceConfig, forward, llama_layer

FEATURE_DTYPE = np.float16  # on the link: 2 bytes a value, the cost model's feature_bytes_per_token


@dataclass(frozen=True)
class HeadWeights:
    fc: np.ndarray  # (2C, C): [embedding; feature] -> C
    fc_bias: np.ndarray  # (C,)
    body: PackedWeights  # the head's layer and final norm, its target's embedding and LM head


def pack_head(tensors: dict, config: ReferenceConfig, target: PackedWeights) -> HeadWeights:
    """A head folder's tensors (catalog read_head) beside its target's packed weights."""
    if target.embed.shape[1] != config.spec.d_model:
        raise ValueError(f"draft head of width {config.spec.d_model} for a target of width {target.embed.shape[1]}")
    body = PackedWeights(target.embed, None, (llama_layer(tensors, "model.layers.0.", config.spec),),
                         (tensors["model.norm.weight"], None), target.head)
    return HeadWeights(np.ascontiguousarray(tensors["fc.weight"].T), tensors["fc.bias"], body)


class HeadModel:
    """The drafter's model when it drafts from the target's features: the head's weights and KV
    cache, and the target features received so far, by position (`features[p]` = f_p)."""

    drafts_from_features = True

    def __init__(self, weights: HeadWeights, config: ReferenceConfig):
        self.weights, self.config = weights, config
        self.cache = KVCache(1)
        self.features = np.zeros((0, config.spec.d_model), dtype=np.float32)

    def fresh(self) -> "HeadModel":
        return HeadModel(self.weights, self.config)

    def add_features(self, rows) -> None:
        """The next positions' target features (rows of d values, as the link carries them)."""
        rows = np.asarray(rows, dtype=np.float32).reshape(-1, self.config.spec.d_model)
        self.features = np.concatenate([self.features, rows])

    def target_feature(self, position: int) -> np.ndarray:
        """f_position from the target; position -1 (before the first token) is zeros."""
        if position < 0:
            return np.zeros(self.config.spec.d_model, dtype=np.float32)
        if position >= len(self.features):
            raise RuntimeError(f"draft head: no target feature for position {position} yet "
                               f"({len(self.features)} received)")
        return self.features[position]

    def _inputs(self, tokens, features) -> np.ndarray:
        embedded = self.weights.body.embed[np.asarray(tokens, dtype=int)]
        return np.concatenate([embedded, np.asarray(features, dtype=np.float32)], axis=1) @ self.weights.fc \
            + self.weights.fc_bias

    def run(self, tokens, positions, parents=None) -> np.ndarray:
        """Logits of verified tokens, each row reading the target's feature of the position before."""
        features = np.stack([self.target_feature(int(p) - 1) for p in positions])
        return forward(self.weights.body, self.config, tokens, positions, self.cache, parents,
                       inputs=self._inputs(tokens, features))

    def run_rows(self, tokens, positions, features, cache_visible) -> tuple[np.ndarray, np.ndarray]:
        """Drafted rows that see only the cached rows `cache_visible` marks (their ancestors) and
        themselves: (logits, predicted features)."""
        n = len(tokens)
        return forward(self.weights.body, self.config, tokens, positions, self.cache, [-1] * n,
                       inputs=self._inputs(tokens, features), cache_visible=cache_visible, with_features=True)
