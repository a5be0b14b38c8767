"""The reference decoder (issue 6): a small numpy model that really runs drafting and verification,
independent of the analytical code (it imports specs only)."""

from dfvg_dse.reference.sampling import GREEDY, Sampling, distribution
from dfvg_dse.reference.speculative import (TOKEN_RECORD, TOKEN_RECORD_BYTES, DraftTree, Drafter, Model, Verdict,
                                            Verifier, generate_ar, generate_speculative)
from dfvg_dse.reference.teacher import greedy_agreement
from dfvg_dse.reference.tiny_lm import KVCache, ReferenceConfig, forward, pack_weights, random_weights, tree_mask

__all__ = ["GREEDY", "TOKEN_RECORD", "TOKEN_RECORD_BYTES", "DraftTree", "Drafter", "KVCache", "Model",
           "ReferenceConfig", "Sampling", "Verdict", "Verifier", "distribution", "forward", "generate_ar",
           "generate_speculative", "greedy_agreement", "pack_weights", "random_weights", "tree_mask"]
