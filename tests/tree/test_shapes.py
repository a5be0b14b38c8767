"""Tree families and conversions: parents <-> choices <-> vLLM literal, safe parsing."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dfvg_dse.specs import InputError, SpecError
from dfvg_dse.tree import (chain, from_choices, from_parents, kary, parse_tree_spec, sequences, to_choices,
                           to_vllm_literal)


def test_chain_counts_depth_and_nodes_as_documented():
    tree = parse_tree_spec("chain:4")
    assert (tree.depth, tree.n_nodes, tree.budget) == (4, 5, 4)
    assert tree.parents == (-1, 0, 1, 2, 3)


def test_sequences_and_kary_shapes():
    seq = sequences(3, 2)
    assert seq.budget == 6 and seq.depth == 2 and seq.level_widths() == (3, 3)
    assert to_choices(seq) == [[0], [0, 0], [1], [1, 0], [2], [2, 0]]
    full = kary(2, 3)
    assert full.budget == 2 + 4 + 8 and full.level_widths() == (2, 4, 8)


def test_vllm_literal_matches_the_engine_convention():
    # T15: speculative_token_tree="[(0,), (1,), (0, 0)]" requires num_speculative_tokens = 3
    tree = parse_tree_spec("vllm:[(0,), (1,), (0, 0)]")
    assert tree.budget == 3
    assert to_vllm_literal(tree) == "[(0,), (1,), (0, 0)]"


def _random_choices(draws):
    paths = set()
    for path in draws:
        for i in range(1, len(path) + 1):  # close under parents and elder siblings
            prefix = path[:i]
            for r in range(prefix[-1] + 1):
                paths.add(prefix[:-1] + (r,))
    return sorted(paths, key=lambda p: (len(p), p))


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=4).map(tuple), min_size=1, max_size=12))
def test_choices_parents_choices_round_trip(draws):
    choices = _random_choices(draws)
    tree = from_choices([list(c) for c in choices])
    assert sorted(map(tuple, to_choices(tree)), key=lambda p: (len(p), p)) == choices
    again = from_parents(tree.parents, tree.ranks)
    assert again.parents == tree.parents and again.ranks == tree.ranks
    assert parse_tree_spec("vllm:" + to_vllm_literal(tree)).parents == tree.parents
    assert all(0 <= p < i for i, p in enumerate(tree.parents) if i)  # ancestors first


@pytest.mark.parametrize("spec, message", [
    ("chain:0", "chain length must be >= 1"),
    ("seq:2", "expected chain:G"),
    ("choices:[[0],[1,0]]", "has no parent path [1]"),
    ("choices:[[0],[0]]", "duplicate path"),
    ("choices:__import__('os')", "is not a list of paths"),
    ("choices:[[-1]]", "is not a path of ranks"),
    ("parents:-1,x", "parents must be integers"),
    ("kary:64x4", "nodes; at most"),
])
def test_bad_tree_specs_are_one_line_errors(spec, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_tree_spec(spec)


def test_parent_arrays_must_be_topological():
    with pytest.raises(SpecError, match="must be an earlier node"):
        parse_tree_spec("parents:-1,2,0")
    assert parse_tree_spec("parents:-1,0,0,1").ranks == (0, 0, 1, 0)
    assert chain(1).parents == (-1, 0)
