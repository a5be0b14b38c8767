"""Token trees: families and conversions (shapes), optimal static trees (optimal)."""

from dfvg_dse.tree.optimal import (DPTable, HardwareChoice, OptimalTree, best_tree_for_round_time, check_sequoia,
                                   dp_tree,
                                   greedy_tree, optimal_tree, sequoia_dp)
from dfvg_dse.tree.shapes import (chain, draw_tree, from_choices, from_document, from_parents, kary, parse_tree_spec, sequences, to_choices,
                                  to_vllm_literal)

__all__ = ["DPTable", "HardwareChoice", "OptimalTree", "best_tree_for_round_time", "chain", "check_sequoia", "draw_tree", "dp_tree",
           "from_choices", "from_document", "from_parents", "greedy_tree", "kary", "optimal_tree", "parse_tree_spec", "sequences",
           "sequoia_dp", "to_choices", "to_vllm_literal"]
