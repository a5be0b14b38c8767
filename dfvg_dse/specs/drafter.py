"""Draft heads as data (issue 18; docs/cost-model.md, "Draft heads"): drafters that read the
target's hidden states instead of running a language model of their own.

- `eagle` (EAGLE-1/2): an input projection fc of [token embedding; feature] (2d -> d) and one decoder
  layer, whose first norm EAGLE drops; it drafts through the target's own LM head (shared, not stored).
- `eagle3` (EAGLE-3): fc fuses `feature_layers` (3) target layers' hidden states (3d -> d, no bias); the
  decoder layer's q/k/v read [token embedding; fused feature] (2d wide), with a norm for each half;
  a final norm and an LM head of its own over a `draft_vocab` of the target's tokens (32,000).
- `medusa` (Medusa-1/2): `medusa_heads` heads on the last hidden state, each `medusa_layers` residual
  blocks (d -> d with bias, SiLU) and its own LM head over the target's vocabulary.
- `mtp`: the target's own multi-token-prediction module (DeepSeek-V3: one decoder layer of the target's
  kind, eh_proj of [embedding; hidden] 2d -> d, two norms; embedding and head shared with the target).

Standalone draft models (`lm`) are ModelSpecs; model-free lookups (`ngram`, `suffix`) have no weights.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from dfvg_dse.specs.hardware import SpecError, _require_choice
from dfvg_dse.specs.model import LOOKUP_KINDS, ModelSpec

HEAD_KINDS = ("eagle", "eagle3", "medusa", "mtp")
DRAFTER_KINDS = ("lm", *HEAD_KINDS, *LOOKUP_KINDS)
# what a kind reads from the target per drafted position, in hidden states of d values
FEATURE_LAYERS_DEFAULT = {"eagle": 1, "eagle3": 3, "medusa": 1, "mtp": 1}
FC_BIAS_DEFAULT = {"eagle": True, "eagle3": False, "medusa": True, "mtp": False}
FEATURE_BYTES_PER_VALUE = 2  # hidden states cross the link in 16 bits, as the target computes them


def one_layer_of(model: ModelSpec) -> ModelSpec:
    """One decoder layer of `model` as a model: its last kind (an MoE layer where it has experts), no
    MTP module."""
    moe = dataclasses.replace(model.moe, dense_layers=0) if model.moe is not None else None
    # alternating windows (gpt-oss): a full-attention layer; a window on every layer (Mistral) stays
    window = 0 if model.sliding_layers else model.sliding_window
    return dataclasses.replace(model, n_layers=1, moe=moe, mtp_layers=0, sliding_layers=0, sliding_window=window)


@dataclass(frozen=True)
class HeadSpec:
    """A draft head for `target`. `layer` is the shape of its decoder layers (a ModelSpec whose
    n_layers is the head's layer count; for `mtp` the target itself, for `medusa` None);
    `draft_vocab` is the rows of its own LM head, 0 when it drafts through the target's (shared)."""

    name: str
    kind: str
    target: ModelSpec
    layer: ModelSpec | None
    feature_layers: int
    fc_bias: bool
    draft_vocab: int = 0
    medusa_heads: int = 0
    medusa_layers: int = 0
    display_name: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        _require_choice(self, "kind", HEAD_KINDS)
        for field in ("feature_layers", "draft_vocab", "medusa_heads", "medusa_layers"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(field, value, "must be an integer >= 0")
        if self.feature_layers < 1 or self.feature_layers > self.target.n_layers:
            raise SpecError("feature_layers", self.feature_layers,
                            f"must be in 1..{self.target.n_layers} (the target's layers)")
        if self.kind == "medusa":
            if self.medusa_heads < 1 or self.medusa_layers < 1:
                raise SpecError("medusa_num_heads", (self.medusa_heads, self.medusa_layers),
                                "a Medusa head needs medusa_num_heads >= 1 and medusa_num_layers >= 1")
        elif self.layer is None:
            raise SpecError("config", None, f"a {self.kind} head needs its decoder layer's shape ([config])")
        elif self.layer.d_model != self.target.d_model:
            raise SpecError("hidden_size", self.layer.d_model,
                            f"must equal the target's hidden size ({self.target.name}: {self.target.d_model})")
        if self.draft_vocab > self.target.vocab_size:
            raise SpecError("draft_vocab_size", self.draft_vocab,
                            f"must be <= the target's vocabulary ({self.target.vocab_size})")

    @property
    def d_model(self) -> int:
        return self.target.d_model

    @property
    def feature_values(self) -> int:
        """Target hidden-state values it reads per position (EAGLE-3: 3 layers x d)."""
        return self.feature_layers * self.d_model

    @property
    def shares_target_head(self) -> bool:
        """Drafts through the target's LM head (EAGLE-1/2, MTP): read every step, stored once, by the target."""
        return self.kind in ("eagle", "mtp") and not self.draft_vocab

    def as_model(self) -> ModelSpec:
        """The head as the cost model prices a draft: its decoder layer(s), its input projections as
        `extra_matmul_params`, and as LM head its own (EAGLE-3, Medusa) or the target's (EAGLE-1/2,
        MTP); the target's dtypes. Its tables are stored as it uses them: the target's embedding (none
        for Medusa) and any head it shares, counted once on the target's own device (`shared_params`).
        Medusa has no decoder layer: its k heads' residual blocks and LM heads run in one forward on
        the last hidden state, so it drafts at most k positions a round (`max_draft_depth`)."""
        d, base, target_table = self.d_model, self.layer, self.target.vocab_size * self.d_model
        rows, depth = self.target.vocab_size, 0
        if self.kind == "medusa":  # every head but one as extra weights, the last as the LM head
            base = dataclasses.replace(self.target, head_kind="medusa", n_layers=0, moe=None, mla=None, mtp_layers=0,
                                       sliding_layers=0, sliding_window=0, final_norm=False, tied_embeddings=False)
            extra = self.medusa_heads * self.medusa_layers * d * d + (self.medusa_heads - 1) * d * self.target.vocab_size
            vocab, rows, depth, shared = self.target.vocab_size, 0, self.medusa_heads, 0
        elif self.kind == "mtp":
            base, extra, vocab = one_layer_of(base), 2 * d * d, self.target.vocab_size
        elif self.kind == "eagle":
            extra, vocab = 2 * d * d, self.draft_vocab or self.target.vocab_size
        else:  # EAGLE-3: fc over the fused features, and q/k/v's second (feature) half
            extra = self.feature_layers * d * d + d * (base.n_heads + 2 * base.n_kv_heads) * base.head_dim
            vocab = self.draft_vocab or self.target.vocab_size
        if self.kind != "medusa":  # the target's embedding, and its head when the head drafts through it
            shared = target_table + (target_table if self.shares_target_head else 0)
        return dataclasses.replace(
            base, name=self.name, display_name=self.display_name or self.name, source=self.source, vocab_size=vocab,
            tied_embeddings=False, weight_dtype=self.target.weight_dtype, kv_dtype=self.target.kv_dtype,
            head_dtype=self.target.head_dtype, head_kind=self.kind, extra_matmul_params=extra,
            feature_bytes_per_token=self.feature_values * FEATURE_BYTES_PER_VALUE,
            embedding_rows=None if rows == vocab else rows, shared_params=shared, max_draft_depth=depth)


# each lookup kind's parameters (the rest stay 0): n-gram sizes; suffix decoding's tree depth, the
# speculation length per matched token and the probability floor (vLLM's suffix_decoding_* fields)
LOOKUP_PARAMS = {"ngram": ("min_ngram", "max_ngram"),
                 "suffix": ("max_tree_depth", "max_spec_factor", "min_token_prob")}


@dataclass(frozen=True)
class LookupSpec:
    """A model-free drafter, found on the host CPU beside the verifier in `lookup_s_per_round` +
    `lookup_s_per_context_token` x context seconds per sequence (`cost_source`); one continuation, a
    chain, each round.

    - `ngram`: prompt lookup (Saxena's prompt-lookup decoding; vLLM `ngram`, SGLang NGRAM,
      transformers' prompt_lookup_num_tokens): the tokens that followed the last n tokens earlier in
      the sequence, n from `max_ngram` down to `min_ngram`.
    - `suffix`: suffix decoding (Oliaro et al., arXiv 2411.04975; vLLM `suffix`): the most frequent
      continuation in a suffix tree of the request's text cut at `max_tree_depth` tokens, up to
      `max_spec_factor` x the matched length tokens while its estimated probability stays at or
      above `min_token_prob` (reference/lookup.py SuffixTrie); so at most max_tree_depth - 1 a round."""

    name: str
    lookup_s_per_round: float
    lookup_s_per_context_token: float
    cost_source: str
    kind: str = "ngram"
    min_ngram: int = 0
    max_ngram: int = 0
    max_tree_depth: int = 0
    max_spec_factor: float = 0.0
    min_token_prob: float = 0.0
    display_name: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        _require_choice(self, "kind", LOOKUP_KINDS)
        mine = LOOKUP_PARAMS[self.kind]
        for field in (f for params in LOOKUP_PARAMS.values() for f in params if f not in mine):
            if getattr(self, field):
                raise SpecError(field, getattr(self, field), f"not a parameter of a {self.kind} lookup ({', '.join(mine)})")
        for field in ("min_ngram", "max_ngram", "max_tree_depth"):
            value = getattr(self, field)
            if field in mine and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise SpecError(field, value, "must be an integer >= 1")
        if self.kind == "ngram" and self.min_ngram > self.max_ngram:
            raise SpecError("min_ngram", self.min_ngram, f"must be <= max_ngram ({self.max_ngram})")
        if self.kind == "suffix":
            if self.max_tree_depth < 2:
                raise SpecError("max_tree_depth", self.max_tree_depth, "must be >= 2 (a match and a continuation)")
            if isinstance(self.max_spec_factor, bool) or not 0 < self.max_spec_factor < math.inf:
                raise SpecError("max_spec_factor", self.max_spec_factor, "must be a finite number > 0")
            if isinstance(self.min_token_prob, bool) or not 0 <= self.min_token_prob <= 1:
                raise SpecError("min_token_prob", self.min_token_prob, "must be a probability in [0, 1]")
        for field in ("lookup_s_per_round", "lookup_s_per_context_token"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise SpecError(field, value, "must be a finite number of seconds >= 0")

    @property
    def params(self) -> dict:
        """The kind and its parameters, as the exports and `models lookups` name them."""
        return {"kind": self.kind, **{f: getattr(self, f) for f in LOOKUP_PARAMS[self.kind]}}

    @property
    def max_draft_depth(self) -> int:
        """Positions a round can draft at most (0: no limit of its own): a suffix tree's depth less
        the one token a match needs."""
        return self.max_tree_depth - 1 if self.kind == "suffix" else 0

    def as_model(self, target: ModelSpec) -> ModelSpec:
        """The lookup as the cost model prices a draft for `target`: no layer, no weights, no cache;
        its host-CPU seconds a round (costs/stages.py)."""
        return dataclasses.replace(
            target, name=self.name, display_name=self.display_name or self.name, source=self.source,
            head_kind=self.kind, n_layers=0, moe=None, mla=None, mtp_layers=0, sliding_layers=0, sliding_window=0,
            extra_matmul_params=0, feature_bytes_per_token=0, embedding_rows=0, shared_params=0,
            max_draft_depth=self.max_draft_depth,
            lookup_s_per_round=self.lookup_s_per_round, lookup_s_per_context_token=self.lookup_s_per_context_token)
