"""Trace replay (acceptance/replay.py) against independent computations: the reference decoder's
own rounds (greedy replay is exact), the i.i.d. closed form F(T) (ranks drawn independently), and
a Monte Carlo simulation of the sampled chain's Bernoulli process."""

import json
from pathlib import Path

import numpy as np
import pytest

from dfvg_dse.acceptance import can_replay, expected_tokens, replay
from dfvg_dse.acceptance.replay import replay_greedy_run
from dfvg_dse.catalog import Catalog
from dfvg_dse.reference import Model, ReferenceConfig
from dfvg_dse.reference.speculative import generate_speculative
from dfvg_dse.reference.teacher import teacher_forced_acceptance
from dfvg_dse.specs import AcceptanceProfile, AcceptanceTrace, SpecError, TreeSpec
from dfvg_dse.tree import parse_tree_spec

PROMPTS = Path(__file__).resolve().parents[2] / "models" / "reference" / "prompts.jsonl"


def _pair() -> tuple[Model, Model]:
    models = []
    for role in ("target", "draft"):
        _, spec, tensors, _ = Catalog.read_checkpoint("builtin:tiny", role)
        models.append(Model(tensors, ReferenceConfig(spec)))
    return models[0], models[1]


@pytest.mark.parametrize("spec", ["chain:3", "kary:2x2", "seq:2x3", "[-1, 0, 0, 1, 2, 3]"])
def test_greedy_replay_equals_the_reference_decoders_rounds(spec):
    target, draft = _pair()
    tree = parse_tree_spec(spec) if spec.startswith(("chain", "kary", "seq")) else \
        TreeSpec(tuple(json.loads(spec)), (0, 0, 1, 0, 0, 0))
    prompts = [list(json.loads(line)["text"].encode()) for line in PROMPTS.read_text().splitlines()[40:44]]
    new = 48
    measured = []
    ranks = []
    for prompt in prompts:
        trace: list = []
        generate_speculative(target.fresh(), draft.fresh(), prompt, new, tree.parents, tree.ranks, trace)
        measured += [len(r["accepted"]) for r in trace]
        ranks.append(tuple(teacher_forced_acceptance(target.fresh(), draft.fresh(), prompt, new + 8)["ranks"]))
    result = replay(tree, AcceptanceTrace("reference", new, ranks=tuple(ranks)))
    assert result.tokens_per_round == pytest.approx(np.mean(measured), abs=1e-12)
    assert result.rounds * len(prompts) == len(measured)


@pytest.mark.parametrize("spec", ["chain:4", "kary:2x2", "seq:3x2"])
def test_independent_ranks_replay_to_the_closed_form(spec):
    """Ranks drawn i.i.d. from p (and 'none of them' otherwise): pooled tokens per round of a long
    run is the renewal mean, F(T) under the rank vector p."""
    probs = (0.6, 0.15, 0.05)
    tree = parse_tree_spec(spec)
    rng = np.random.default_rng(3)
    draws = rng.choice(4, size=200_000, p=probs + (1 - sum(probs),))  # 3 stands for an unoffered rank
    ranks = tuple(int(r) if r < 3 else 99 for r in draws)
    result = replay(tree, AcceptanceTrace("iid", len(ranks) - 20, ranks=(ranks,)))
    assert result.tokens_per_round == pytest.approx(expected_tokens(tree, AcceptanceProfile("iid", probs)), rel=0.01)


def test_greedy_hits_need_the_whole_first_choice_path_and_a_first_choice_bonus():
    chain = parse_tree_spec("chain:2")
    # roots at 0, 3, 6: rounds accept 2 (bonus rank 0: hit), 2 (bonus rank 1: miss), then 0 (root 7 ends the run)
    ranks = (-1, 0, 0, 0, 0, 0, 1, 5, 0, 0)
    tokens, rounds, hits = replay_greedy_run(chain, ranks, 8)
    assert (tokens, rounds, hits) == (3 + 3 + 1, 3, 1)


def test_sampled_chain_replay_matches_a_simulation():
    rng = np.random.default_rng(5)
    run_tokens, length = 40, 3
    accept = rng.uniform(0.2, 0.95, size=run_tokens + 8)
    bonus = rng.uniform(0.1, 0.9, size=run_tokens + 8)
    trace = AcceptanceTrace("s", run_tokens, accept_probs=(tuple(accept),), bonus_probs=(tuple(bonus),))
    result = replay(parse_tree_spec(f"chain:{length}"), trace)
    sim = np.random.default_rng(11)
    tokens = rounds = hits = 0
    for _ in range(20_000):
        root = 0
        while root + 1 < run_tokens:
            k = 0
            while k < length and sim.random() < accept[root + k + 1]:
                k += 1
            hits += k == length and sim.random() < bonus[root + k + 1]
            tokens, rounds, root = tokens + k + 1, rounds + 1, root + k + 1
    assert result.tokens_per_round == pytest.approx(tokens / rounds, rel=0.005)
    assert result.hit_rate == pytest.approx(hits / rounds, rel=0.03)


def test_sampled_traces_replay_chains_only_and_traces_are_checked():
    trace = AcceptanceTrace("s", 4, accept_probs=((0.0, 0.5, 0.5, 0.5),), bonus_probs=((0.0, 0.1, 0.1, 0.1),))
    assert can_replay(parse_tree_spec("chain:2"), trace)
    assert not can_replay(parse_tree_spec("kary:2x2"), trace)
    with pytest.raises(ValueError, match="chains only"):
        replay(parse_tree_spec("kary:2x2"), trace)
    with pytest.raises(SpecError, match="run_tokens"):
        AcceptanceTrace("short", 10, ranks=((-1, 0, 0),))


def test_adapt_replay_is_close_to_the_reference_decoders_rounds():
    """ADAPT's replay knows the draft only along the target's path (every node of a level gets the
    path node's children), so it is approximate: within 5% of the decoder on 4 prompts, and its
    drafted nodes per round within 5% too."""
    from dfvg_dse.acceptance import replay_adapt
    from dfvg_dse.specs import AdaptRule

    target, draft = _pair()
    rule = AdaptRule(threshold=0.05, k_max=4, budget=8, min_depth=2, max_depth=6)
    prompts = [list(json.loads(line)["text"].encode()) for line in PROMPTS.read_text().splitlines()[40:44]]
    new = 64
    measured, nodes, runs = [], [], []
    for prompt in prompts:
        trace: list = []
        generate_speculative(target.fresh(), draft.fresh(), prompt, new, trace=trace, rule=rule)
        measured += [len(r["accepted"]) for r in trace]
        nodes += [len(r["parents"]) - 1 for r in trace]
        runs.append(teacher_forced_acceptance(target.fresh(), draft.fresh(), prompt, new + 8))
    trace = AcceptanceTrace("reference", new, ranks=tuple(tuple(r["ranks"]) for r in runs),
                            top_probs=tuple(r["top_probs"] for r in runs))
    result = replay_adapt(rule, trace)
    assert result.tokens_per_round == pytest.approx(np.mean(measured), rel=0.05)
    assert result.widths.sum(axis=1).mean() == pytest.approx(np.mean(nodes), rel=0.05)
