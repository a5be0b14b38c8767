"""Optimal trees: T6 (Sequoia's demo vector), brute-force optimality, width caps, hardware choice."""

import itertools
import re
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dfvg_dse.acceptance.expected import expected_tokens
from dfvg_dse.specs import AcceptanceProfile, InputError, TreeSpec
from dfvg_dse.tree import best_tree_for_round_time, dp_tree, greedy_tree, optimal_tree, sequoia_dp
from test_expected import DEMO_PROFILE

# T6 (docs/acceptance-and-trees.md; Infini-AI-Lab/Sequoia demo vector): best F by node count n (root included), depth <= 10 levels including the root
T6_N = {1: 1.0, 2: 1.6342, 3: 2.0364, 4: 2.2914, 5: 2.4532, 6: 2.5611, 8: 2.7322, 16: 3.1303, 32: 3.5007,
        64: 3.8523, 128: 4.1921}
T6_DEPTH = {16: [1.9025, 2.5207, 2.8645, 3.0126, 3.0876, 3.1252, 3.1303, 3.1303, 3.1303],
            128: [None, 2.7582, 3.3548, 3.7358, 3.9577, 4.0855, 4.1512, 4.1793, 4.1921]}


def test_t6_best_f_by_size():
    # Sequoia's n nodes and 10 levels = our budget n - 1 and depth 9
    table = sequoia_dp(DEMO_PROFILE, 127, 9)
    for n, value in T6_N.items():
        assert table.best[n] == pytest.approx(value, abs=5e-5)
        assert expected_tokens(dp_tree(table, n), DEMO_PROFILE) == pytest.approx(table.best[n], rel=1e-12)


@pytest.mark.parametrize("nodes", [16, 128])
def test_t6_depth_limited(nodes):
    for levels, value in zip(range(2, 11), T6_DEPTH[nodes]):
        best = sequoia_dp(DEMO_PROFILE, nodes - 1, levels - 1).best[nodes]
        if value is None:  # 128 nodes in 2 levels: at most 32 branches, 33 nodes
            assert best == -np.inf
        else:
            assert best == pytest.approx(value, abs=5e-5)
    deep = sequoia_dp(DEMO_PROFILE, 127, 63)
    assert deep.best[64] == pytest.approx(3.8554, abs=5e-5) and deep.best[128] == pytest.approx(4.2021, abs=5e-5)


def test_t6_hardware_optimizer_on_the_demo_config():
    # demo-config.json: draft_time 0.3 per level (Sequoia charges one per level, root included),
    # target_time [10, 10, 10, 12, 14, 18] for n = [1, 2, 4, 8, 16, 32] nodes; best x = 4.8878 at
    # n = 4, depth 4 levels: a chain, as the repo's demo_tree.pt
    target = {1: 10, 2: 10, 4: 10, 8: 12, 16: 14, 32: 18}

    def round_time(tree: TreeSpec) -> float:
        return (tree.depth + 1) * 0.3 + target[tree.n_nodes] if tree.n_nodes in target else np.inf

    choice = best_tree_for_round_time(DEMO_PROFILE, round_time, 31, 9)
    assert choice.tree.parents == (-1, 0, 1, 2)
    assert 1 / choice.tokens_per_s == pytest.approx(4.8878, abs=5e-5)
    assert 10 * choice.tokens_per_s == pytest.approx(2.0459, abs=5e-5)


@lru_cache(maxsize=None)
def _ordered_trees(nodes: int) -> tuple:
    """Every ordered (plane) tree with `nodes` nodes, as nested tuples of children."""
    if nodes == 1:
        return ((),)
    out = []
    for parts in _compositions(nodes - 1):
        for kids in itertools.product(*(_ordered_trees(p) for p in parts)):
            out.append(tuple(kids))
    return tuple(out)


def _compositions(total: int):
    if total == 0:
        yield ()
        return
    for first in range(1, total + 1):
        for rest in _compositions(total - first):
            yield (first,) + rest


def _to_spec(shape) -> TreeSpec:
    parents, ranks = [-1], [0]
    stack = [(0, shape)]
    while stack:
        index, kids = stack.pop()
        for rank, kid in enumerate(kids):
            parents.append(index)
            ranks.append(rank)
            stack.append((len(parents) - 1, kid))
    return TreeSpec(tuple(parents), tuple(ranks))


def brute_force(profile, budget, depth, width=None):
    """Best F over every tree with at most budget draft tokens, depth and per-level width limits."""
    best = 1.0
    for nodes in range(2, budget + 2):
        for shape in _ordered_trees(nodes):
            tree = _to_spec(shape)
            if tree.depth <= depth and (width is None or max(tree.level_widths()) <= width):
                best = max(best, expected_tokens(tree, profile))
    return best


ranked = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4).map(lambda v: np.array(v) / max(1.0, sum(v) * 1.05))


@settings(max_examples=25)
@given(ranked, st.integers(1, 7), st.integers(1, 4))
def test_dp_is_optimal_against_brute_force_for_any_rank_vector(p, budget, depth):
    profile = AcceptanceProfile("h", tuple(float(x) for x in p))  # not necessarily monotone
    result = optimal_tree(profile, budget, depth)
    assert result.expected_tokens == pytest.approx(brute_force(profile, budget, depth), rel=1e-9)
    assert result.tree.budget <= budget and result.tree.depth <= depth


@settings(max_examples=25)
@given(ranked, st.integers(1, 7), st.integers(1, 4), st.integers(1, 3), st.booleans())
def test_capped_greedy_is_optimal_for_ranked_profiles(p, budget, depth, width, decay):
    p = np.sort(p)[::-1]
    rows = tuple(tuple(float(x) * (0.8 ** d if decay else 1.0) for x in p) for d in range(depth))
    profile = AcceptanceProfile("h", rows[0], depth_rank=rows)
    tree = greedy_tree(profile, budget, depth, width)
    assert max(tree.level_widths()) <= width and tree.depth <= depth and tree.budget <= budget
    assert expected_tokens(tree, profile) == pytest.approx(brute_force(profile, budget, depth, width), rel=1e-9)
    if width >= budget:  # no cap in effect: the greedy and the DP agree
        assert expected_tokens(tree, profile) == pytest.approx(optimal_tree(profile, budget, depth).expected_tokens)


def test_width_cap_binds_on_the_demo_vector():
    free = optimal_tree(DEMO_PROFILE, 63, 9)
    capped = optimal_tree(DEMO_PROFILE, 63, 9, max_width=8)
    assert max(free.tree.level_widths()) > 8 and max(capped.tree.level_widths()) <= 8
    assert capped.expected_tokens < free.expected_tokens
    assert capped.method == "greedy-heuristic"  # the demo vector is not monotone (p_9 > p_8)


def test_dp_refuses_past_its_step_limit_and_names_what_fits(monkeypatch):
    from dfvg_dse.tree import optimal

    monkeypatch.setattr(optimal, "MAX_DP_STEPS", optimal.dp_steps(63, 9, 32))
    sequoia_dp(DEMO_PROFILE, 63, 9)  # at the limit: runs
    with pytest.raises(InputError, match=r"depth <= 9 at budget 63 or budget <= \d+ at depth 10") as caught:
        sequoia_dp(DEMO_PROFILE, 63, 10)  # one level past it: refused before any work
    fits = int(re.search(r"budget <= (\d+) at depth", str(caught.value)).group(1))
    assert optimal.dp_steps(fits, 10, 32) <= optimal.MAX_DP_STEPS < optimal.dp_steps(fits + 1, 10, 32)
    assert len(str(caught.value)) < 200


def test_dp_caps_depth_and_ranks_at_the_budget():
    # levels past the budget hold no node, and a node has at most `budget` children
    capped, deep = sequoia_dp(DEMO_PROFILE, 12, 12), sequoia_dp(DEMO_PROFILE, 12, 4096)
    np.testing.assert_array_equal(capped.best, deep.best)
    assert dp_tree(capped, 13) == dp_tree(deep, 13)
    assert optimal_tree(DEMO_PROFILE, 15, 4096).tree == optimal_tree(DEMO_PROFILE, 15, 15).tree
    assert greedy_tree(DEMO_PROFILE, 15, 4096, 4) == greedy_tree(DEMO_PROFILE, 15, 15, 4)
    with pytest.raises(InputError, match="depth 1025 is past 1024 levels"):
        greedy_tree(DEMO_PROFILE, 2000, 1025, 4)
