"""Greedy speculative decoding with the reference engine is lossless: it reproduces greedy
autoregressive decoding token for token, for chains and trees, over many prompts."""

import numpy as np
import pytest

from dfvg_dse.reference import Drafter, Model, ReferenceConfig, generate_ar, generate_speculative, random_weights
from dfvg_dse.specs import ModelSpec

TARGET = ModelSpec(name="t", family="llama", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ffn=64,
                   vocab_size=24, max_positions=512)
DRAFT = ModelSpec(name="d", family="llama", n_layers=1, d_model=16, n_heads=2, n_kv_heads=2, head_dim=8, d_ffn=32,
                  vocab_size=24, max_positions=512)
TREES = {"chain:3": ([-1, 0, 1, 2], [0, 0, 0, 0]), "kary:2x2": ([-1, 0, 0, 1, 1, 2, 2], [0, 0, 1, 0, 1, 0, 1]),
         "seq:3x2": ([-1, 0, 0, 0, 1, 2, 3], [0, 0, 1, 2, 0, 0, 0])}


def models(seed: int, draft_is_target: bool = False):
    tw = random_weights(TARGET, seed=seed, scale=0.3)
    target = Model(tw, ReferenceConfig(TARGET))
    if draft_is_target:
        return target, Model(tw, ReferenceConfig(TARGET))
    return target, Model(random_weights(DRAFT, seed=seed + 100, scale=0.3), ReferenceConfig(DRAFT))


@pytest.mark.parametrize("tree", list(TREES))
def test_greedy_speculative_equals_greedy_autoregressive(tree):
    parents, ranks = TREES[tree]
    rng = np.random.default_rng(0)
    for seed in range(34):  # 34 prompts per tree shape, 102 in all
        prompt = [int(t) for t in rng.integers(0, 24, size=int(rng.integers(1, 6)))]
        target, draft = models(seed)
        expected = generate_ar(target, prompt, 12)
        target, draft = models(seed)
        got, counts = generate_speculative(target, draft, prompt, 12, parents, ranks)
        assert got == expected
        assert counts.sum() >= 1


def test_a_draft_equal_to_the_target_is_always_accepted():
    parents, ranks = TREES["chain:3"]
    target, draft = models(5, draft_is_target=True)
    tokens, counts = generate_speculative(target, draft, [1, 2, 3], 13, parents, ranks)
    # every round keeps all 3 draft tokens plus the bonus: 1 + 3 rounds of 4 tokens
    assert counts[3] == counts.sum() == 3 and len(tokens) == 13


def test_a_rank0_chain_draft_is_the_drafts_own_greedy_continuation():
    _, draft = models(7)
    prefix = [3, 1, 4, 1, 5]
    drafter = Drafter(draft, ([-1, 0, 1, 2, 3], [0] * 5))
    tree = drafter.propose(prefix)
    _, fresh = models(7)
    assert tree.tokens[1:] == generate_ar(fresh, prefix, 4)
    assert tree.confidences[0] == 1.0 and all(0 < c <= 1 for c in tree.confidences[1:])
    # the chain's rows stay cached: accepting two nodes keeps them and runs nothing again
    assert draft.cache.length == 4 + 4
    drafter.accept((0, 1, 2))
    assert draft.cache.length == 4 + 3 and drafter.known == prefix + tree.tokens[1:3]
