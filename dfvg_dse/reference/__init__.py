"""The reference decoder (issue 6, in progress): a small numpy model that really runs drafting and
verification, independent of the analytical code (it imports specs only)."""

from dfvg_dse.reference.speculative import (Model, accept_tokens, draft_tree, generate_ar, generate_speculative,
                                            greedy_agreement, verify_tree)
from dfvg_dse.reference.tiny_lm import KVCache, ReferenceConfig, forward, random_weights, tree_mask

__all__ = ["KVCache", "Model", "ReferenceConfig", "accept_tokens", "draft_tree", "forward", "generate_ar",
           "generate_speculative", "greedy_agreement", "random_weights", "tree_mask", "verify_tree"]
