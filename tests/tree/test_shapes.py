"""Tree families and conversions: parents <-> choices <-> vLLM literal, safe parsing."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dfvg_dse.specs import InputError, SpecError
from dfvg_dse.tree import (chain, from_choices, from_document, from_parents, kary, parse_tree_spec, sequences,
                           to_choices, to_vllm_literal)


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
    ("kary:64x4", "draft tokens; at most 4096"),
    # the root alone drafts nothing (estimate ended in "max() arg is an empty sequence"; data fuzzer)
    ("parents:-1", "no draft token below the root"),
    ("choices:[]", "no draft token below the root"),
    ("vllm:[]", "no draft token below the root"),
])
def test_bad_tree_specs_are_one_line_errors(spec, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_tree_spec(spec)


def test_parent_arrays_must_be_topological():
    with pytest.raises(InputError, match=r"parents\[1\] = 2: must be an earlier node"):
        parse_tree_spec("parents:-1,2,0")
    with pytest.raises(SpecError, match="distinct among siblings"):
        from_parents([-1, 0, 0], [0, 1, 1])
    assert parse_tree_spec("parents:-1,0,0,1").ranks == (0, 0, 1, 0)
    assert chain(1).parents == (-1, 0)


@pytest.mark.parametrize("spec, message", [
    ("chain:4097", "4,097 draft tokens; at most 4096"),
    ("chain:1025", "depth 1,025; at most 1024 levels"),
    ("seq:4097x1", "4,097 draft tokens; at most 4096"),
    ("kary:2x12", "8,190 draft tokens; at most 4096"),
    ("kary:2x99999999999", "depth 99,999,999,999; at most 1024"),  # counted lazily: no 2^(10^11) sum
    ("chain:9999999999999999999999", "more than 10^12 draft tokens"),  # no int -> C overflow
    ("parents:" + ",".join(["-1"] + ["0"] * 4097), "4,097 draft tokens; at most 4096"),
    ("parents:" + ",".join(str(i) for i in range(-1, 1025)), "depth 1,025; at most 1024"),
    ("choices:[" + ",".join("[0]" if i == 0 else str([0] * (i + 1)) for i in range(1025)) + "]", "depth 1,025"),
    ("choices:[[4096]]", "ranks in 0..4095"),  # a huge rank would size every rank table after it
])
def test_tree_size_limits_are_one_line_errors(spec, message):
    with pytest.raises(InputError, match=re.escape(message)):
        parse_tree_spec(spec)


def test_trees_at_the_limits_build():
    assert parse_tree_spec("chain:1024").depth == 1024
    assert parse_tree_spec("kary:2x11").budget == 4094
    assert parse_tree_spec("parents:" + ",".join(["-1"] + ["0"] * 4096)).budget == 4096


@pytest.mark.parametrize("spec", [
    "x" * 300, "9" * 300, "chain:" + "9" * 5000, "kary:" + "9" * 300 + "x2", "parents:-1,0," + "9" * 4000,
    "parents:-1," + "-5", "choices:[" + "[0]," * 300 + "]", "choices:[[" + "9" * 300 + "]]", "vllm:" + "(" * 300,
])
def test_odd_literals_are_short_one_line_errors(spec):
    with pytest.raises(InputError) as caught:
        parse_tree_spec(spec)
    text = str(caught.value)
    assert "\n" not in text and len(text) < 200


def test_tree_documents_check_ranks_and_parents():
    with pytest.raises(InputError, match="'ranks' must list one integer"):
        from_document({"parents": [-1, 0], "ranks": [0, "a"]})
    with pytest.raises(InputError, match="'ranks' must list one integer"):
        from_document({"parents": [-1, 0], "ranks": [0]})
    with pytest.raises(InputError, match="4,097 draft tokens"):
        from_document({"parents": [-1] + [0] * 4097})
    with pytest.raises(InputError, match="past the 2,097,152 read as a path list"):
        from_document({"choices": "[" + " " * (1 << 21) + "]"})
    assert from_document({"parents": [-1, 0, 0], "ranks": [0, 1, 0]}).ranks == (0, 1, 0)
    for document in ({"parents": [-1]}, {"choices": []}, {"choices": "[]"}):
        with pytest.raises(InputError, match="tree.json: tree: no draft token below the root"):
            from_document(document, "tree.json")
