"""F(T) against T9 (published trees under the Sequoia demo vector), closed forms and properties."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dfvg_dse.acceptance.expected import expected_tokens, expected_tokens_many, expected_tokens_sequences
from dfvg_dse.acceptance.chain import expected_tokens_chain
from dfvg_dse.specs import AcceptanceProfile
from dfvg_dse.tree import chain, from_choices, parse_tree_spec, sequences

# Infini-AI-Lab/Sequoia demo acceptance-rate-vector.pt: p_1..p_32 (Infini-AI-Lab/Sequoia demo-config.json; 667 verification steps)
DEMO = (0.63418293, 0.10794602, 0.05697151, 0.02248876, 0.01949026, 0.0149925, 0.00449775, 0.0029985, 0.011994,
        0.00449775, 0.00749625, 0.00449775, 0.005997, 0.0029985, 0.00149925, 0.0029985, 0.00149925, 0.0029985, 0.0,
        0.0029985, 0.0029985, 0.0029985, 0.0, 0.00149925, 0.0, 0.00149925, 0.0, 0.0, 0.0, 0.00149925, 0.00149925,
        0.00149925)
DEMO_PROFILE = AcceptanceProfile("sequoia-demo", DEMO)
# SafeAILab/EAGLE eagle/model/choices.py and FasterDecoding/Medusa medusa_choices.py: mc_sim_7b_63
EAGLE = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0], [0, 0, 0], [0, 0, 1],
         [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2],
         [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]
MEDUSA = [[0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5],
          [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8], [9],
          [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1],
          [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0],
          [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0],
          [0, 0, 0, 1], [1, 6], [0, 7, 0]]


@pytest.mark.parametrize("tree, nodes, expected", [
    (from_choices(EAGLE), 26, 3.2313), (from_choices(MEDUSA), 64, 3.3548), (sequences(5, 8), 41, 3.2390),
    (sequences(2, 4), 9, 2.7005), (sequences(16, 48), 769, 3.4754)])
def test_t9_published_trees(tree, nodes, expected):
    # T9 (docs/acceptance-and-trees.md): F of published static trees under the demo vector
    assert tree.n_nodes == nodes
    assert expected_tokens(tree, DEMO_PROFILE) == pytest.approx(expected, abs=5e-5)


@pytest.mark.parametrize("k, length", [(1, 5), (2, 4), (5, 8), (16, 48)])
def test_sequences_closed_form(k, length):
    assert expected_tokens(sequences(k, length), DEMO_PROFILE) == pytest.approx(
        expected_tokens_sequences(DEMO, k, length), rel=1e-12)


def test_chain_with_a_scalar_is_leviathan():
    alpha = AcceptanceProfile("a", (0.8,))
    assert expected_tokens(chain(5), alpha) == pytest.approx(float(expected_tokens_chain(0.8, 5)))
    # rank-1 only: siblings of a scalar profile add nothing
    assert expected_tokens(parse_tree_spec("seq:3x5"), alpha) == pytest.approx(float(expected_tokens_chain(0.8, 5)))


def test_depth_rank_matrix_by_simulation():
    # independent check: sample which child (if any) is accepted at each level and walk the tree
    profile = AcceptanceProfile("dr", (0.7, 0.2), depth_rank=((0.7, 0.2), (0.6, 0.25), (0.5, 0.3)))
    tree = parse_tree_spec("kary:2x4")
    children = {i: {} for i in range(tree.n_nodes)}
    for i in range(1, tree.n_nodes):
        children[tree.parents[i]][tree.ranks[i]] = i
    rng = np.random.default_rng(2)
    table = profile.matrix(4, 2)
    total = 0
    for _ in range(40_000):
        node, depth, tokens = 0, 0, 1
        while children[node]:
            u = rng.random()
            cum = np.cumsum(table[depth])
            rank = int(np.searchsorted(cum, u, side="right"))
            if rank not in children[node]:
                break
            node, depth, tokens = children[node][rank], depth + 1, tokens + 1
        total += tokens
    assert total / 40_000 == pytest.approx(expected_tokens(tree, profile), rel=0.01)


probs = st.lists(st.floats(0, 0.5), min_size=1, max_size=4).filter(lambda v: sum(v) <= 1)


@given(probs, st.lists(st.integers(0, 3), min_size=1, max_size=20))
def test_f_between_one_and_nodes_and_monotone_in_nodes(p, draws):
    profile = AcceptanceProfile("h", tuple(p))
    parents, ranks, taken = [-1], [0], {}
    trees = []
    for draw in draws:  # grow a tree node by node: F never drops
        parent = draw % len(parents)
        rank = taken.get(parent, 0)
        taken[parent] = rank + 1
        parents.append(parent)
        ranks.append(rank)
        trees.append(parse_tree_spec("parents:" + ",".join(map(str, parents))))
    values = expected_tokens_many(trees, profile)
    assert np.all(values >= 1) and np.all(values <= np.array([t.n_nodes for t in trees]) + 1e-12)
    assert np.all(np.diff(values) >= -1e-12)
    assert values[-1] == pytest.approx(expected_tokens(trees[-1], profile))
