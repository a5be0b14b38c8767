"""Designs realised as engines run them (pipeline/realise.py), priced; the engine-support data."""

import dataclasses
import itertools
import re

import pytest

from dfvg_dse.catalog.deploy import parse_engine_support
from dfvg_dse.catalog.errors import DataError
from dfvg_dse.pipeline.grid import SCHEDULE_CHOICES, point_config
from dfvg_dse.search.designs import prepare
from dfvg_dse.pipeline.estimate import estimate
from dfvg_dse.pipeline.realise import max_children, realise, realise_and_price, topk_pool_tree
from dfvg_dse.search.designs import evaluate_point
from dfvg_dse.specs import AcceptanceProfile, TreeSpec
from dfvg_dse.specs.deploy import EngineSupport, pool_size
from dfvg_dse.tree import chain, kary

PROFILE = AcceptanceProfile("p", (0.55, 0.2, 0.1, 0.05), ((0.6, 0.2, 0.1, 0.05), (0.5, 0.25, 0.1, 0.05)))


def support(engine="sglang", trees="topk-pool", max_batch=0, draft_dtype="target"):
    return EngineSupport(engine, "1.0.0", engine, "generic", trees, max_batch, draft_dtype, "checked", "source")


def brute_force_pool(profile, steps, topk):
    """SGLang's pool by its published description, written over paths: every step keeps the topk best
    paths of the last step's expansions (step 0: the root's children) and pools all expansions."""
    pool, frontier = [], [((), 1.0)]
    for step in range(steps):
        expanded = [(path + (r,), score * profile.matrix(steps, topk)[step, r]) for path, score in frontier
                    for r in range(topk)]
        pool += expanded
        frontier = sorted(expanded, key=lambda e: -e[1])[:topk]
    return pool


@pytest.mark.parametrize("steps, topk", [(1, 3), (3, 1), (3, 2), (4, 3), (6, 4)])
def test_topk_pool_tree_is_the_best_of_sglangs_pool(steps, topk):
    pool = brute_force_pool(PROFILE, steps, topk)
    assert len(pool) == pool_size(steps, topk)  # topk + (steps - 1) x topk^2
    for tokens in sorted({1, min(5, len(pool)), len(pool) // 2 or 1, len(pool)}):
        tree = topk_pool_tree(PROFILE, steps, topk, tokens)
        paths = {tuple(p) for p in _paths(tree)}
        best = sorted(pool, key=lambda e: -e[1])[:tokens]
        assert sorted(e[1] for e in best) == pytest.approx(sorted(dict(pool)[p] for p in paths))
        assert tree.budget == tokens and tree.depth <= steps and max_children(tree) <= topk
    full = topk_pool_tree(PROFILE, steps, topk, pool_size(steps, topk))
    if topk > 1:  # the whole pool: topk at the first level, topk^2 at every later one
        assert full.level_widths() == (topk,) + (topk * topk,) * (steps - 1)
    else:
        assert (full.parents, full.ranks) == (chain(steps).parents, chain(steps).ranks)


def _paths(tree: TreeSpec):
    paths = [()]
    for parent, rank in zip(tree.parents[1:], tree.ranks[1:]):
        paths.append(paths[parent] + (rank,))
    return paths[1:]


def test_a_pool_too_small_is_refused():
    with pytest.raises(ValueError, match="exceed the pool of 6"):
        topk_pool_tree(PROFILE, 2, 2, 7)


def test_chain_engines_draft_the_trees_depth_and_cap_their_batch():
    tree = kary(2, 3)
    r = realise(tree, 8, support("hf", "chain", max_batch=1, draft_dtype="own"), PROFILE, "float16", "bfloat16")
    assert r.tree == chain(3) and r.batch == 1 and r.topk == 1 and r.draft_dtype == "bfloat16"
    assert any("chain of its depth, 3" in c for c in r.changes) and any("batch 8 becomes 1" in c for c in r.changes)
    unchanged = realise(chain(4), 4, support("vllm", "chain"), PROFILE, "float16", "float16")
    assert unchanged.tree == chain(4) and unchanged.batch == 4 and unchanged.changes == ()


def test_sglang_keeps_the_trees_depth_and_branching_within_its_pool():
    tree = kary(2, 5)  # 62 draft tokens; SGLang's pool at 5 steps and top-2 holds 18 (the T15 failure)
    r = realise(tree, 2, support(), PROFILE, "float16", "bfloat16")
    assert (r.tree.depth, r.topk, r.tree.budget) == (5, 2, 18) and r.draft_dtype == "float16"
    assert any("at most" in c and "18" in c for c in r.changes)
    assert any("bfloat16 becomes float16" in c for c in r.changes)


def test_a_design_the_engine_runs_unchanged_prices_as_the_search_did(small_space):
    """Same design, two code paths: the search's vectorised closed forms (grid) and the export's
    realise + estimate. A GPU-drafted sequential chain at batch 2 is what a chain engine runs."""
    point = {"family": "chain", "width": 1, "depth": 4, "budget": 0, "batch": 2, "draft_device": "rtx-4090",
             "verify_device": "rtx-4090", "schedule": "sequential"}
    searched = evaluate_point(small_space, point)
    tree = TreeSpec(tuple(searched["parents"]), tuple(searched["ranks"]))
    release = dataclasses.replace(support("vllm", "chain"), draft_dtype="own")
    realised, est = realise_and_price(small_space, tree, 2, "rtx-4090", release, "float16", "bfloat16")
    assert realised.changes == () and est.feasible
    assert est.tokens_per_s == pytest.approx(searched["tokens_per_s"], rel=1e-6)
    assert est.energy.j_per_token == pytest.approx(searched["j_per_token"], rel=1e-6)


def test_every_static_shape_of_a_space_realises_within_the_engine_rules(small_space):
    shapes = prepare(small_space).shapes
    for shape, (engine, trees) in itertools.product(shapes[:40], [("vllm", "chain"), ("sglang", "topk-pool")]):
        tree = TreeSpec(shape.parents, shape.ranks)
        r = realise(tree, 2, support(engine, trees), small_space.acceptance, "float16", "bfloat16")
        assert r.tree.depth == tree.depth
        assert r.tree.budget <= (tree.depth if trees == "chain" else pool_size(tree.depth, max_children(tree)))
        config = point_config(small_space, shape, small_space.verify_devices[0], small_space.verify_devices[0],
                              SCHEDULE_CHOICES[0], 2)
        assert estimate(dataclasses.replace(config, tree=r.tree)).feasible


BAD_RELEASES = [
    ({"trees": "tree"}, "field 'release[0].trees' = 'tree': allowed: chain, topk-pool"),
    ({"max_batch": -1}, "release[0].max_batch"),
    ({"version": "latest"}, "release[0].version"),
    ({"draft_dtype": "fp8"}, "release[0].draft_dtype"),
    ({"extra": 1}, "release[0].extra"),
]


@pytest.mark.parametrize("change, message", BAD_RELEASES)
def test_a_bad_release_is_one_line(tmp_path, change, message):
    release = {"version": "1.0.0", "trees": "chain", "max_batch": 0, "draft_dtype": "own", "checked": "c",
               "source": "s", **change}
    data = {"engine": "vllm", "display_name": "vLLM", "cost_profile": "vllm", "release": [release]}
    with pytest.raises(DataError, match=re.escape(message)):
        parse_engine_support(tmp_path / "vllm.toml", data)


def test_the_shipped_releases_read_and_the_newest_is_the_default(catalog):
    for engine in ("vllm", "sglang", "hf", "trtllm"):
        release = catalog.engine_support(engine)
        assert catalog.engine(release.cost_profile) is not None and release.source.startswith("https://")
    assert catalog.engine_support("vllm").version == "0.33.0" and catalog.engine_support("hf").max_batch == 1
