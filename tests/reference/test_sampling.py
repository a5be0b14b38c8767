"""Sampled speculative decoding follows the target's distribution (chi-square tests against the
exact two-token distribution computed from the target alone), top-p against its definition, and
dynamic drafting (ADAPT, EAGLE-2) is lossless under greedy decoding."""

import itertools

import numpy as np
import pytest
from scipy.stats import chisquare

from dfvg_dse.reference import Model, ReferenceConfig, Sampling, distribution, generate_ar, generate_speculative
from dfvg_dse.reference import random_weights
from dfvg_dse.specs import ModelSpec
from dfvg_dse.specs.decoding import AdaptRule, Eagle2Rule

VOCAB = 6
TARGET = ModelSpec(name="t", family="llama", n_layers=1, d_model=16, n_heads=2, n_kv_heads=1, head_dim=8, d_ffn=24,
                   vocab_size=VOCAB, max_positions=64)
DRAFT = ModelSpec(name="d", family="llama", n_layers=1, d_model=8, n_heads=1, n_kv_heads=1, head_dim=8, d_ffn=16,
                  vocab_size=VOCAB, max_positions=64)
PROMPT = [1, 4, 2]
KARY = ([-1, 0, 0, 1, 1, 2, 2], [0, 0, 1, 0, 1, 0, 1])


def pair(seed: int = 3):
    # a draft that disagrees with the target often enough for every branch of verification to run
    target = Model(random_weights(TARGET, seed=seed, scale=0.6), ReferenceConfig(TARGET))
    return target, Model(random_weights(DRAFT, seed=seed + 50, scale=0.6), ReferenceConfig(DRAFT))


def exact_two_tokens(target: Model, sampling: Sampling) -> np.ndarray:
    """P(t1, t2) of the target alone: p(t1 | prompt) p(t2 | prompt, t1), by enumeration."""
    joint = np.zeros((VOCAB, VOCAB))
    first = distribution(target.fresh().run(PROMPT, np.arange(len(PROMPT)))[-1], sampling)
    for t1 in range(VOCAB):
        logits = target.fresh().run(PROMPT + [t1], np.arange(len(PROMPT) + 1))[-1]
        joint[t1] = first[t1] * distribution(logits, sampling)
    return joint


def chi_square_p(samples: list[tuple[int, int]], joint: np.ndarray) -> float:
    observed = np.zeros_like(joint)
    for t1, t2 in samples:
        observed[t1, t2] += 1
    expected = joint.ravel() * len(samples)
    if observed.ravel()[expected == 0].any():
        return 0.0  # a token the target (after top-p) never produces
    big, rare = expected >= 5, (expected > 0) & (expected < 5)  # pool rare cells: the approximation needs >= 5
    obs, exp = observed.ravel()[big], expected[big]
    if rare.any():
        obs, exp = np.append(obs, observed.ravel()[rare].sum()), np.append(exp, expected[rare].sum())
    return float(chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("verification, tree, rule", [
    ("sequoia", KARY, None),
    ("specinfer", KARY, None),
    ("sequoia", ([-1, 0, 1], [0, 0, 0]), None),  # a chain: plain speculative sampling
    ("sequoia", None, AdaptRule(threshold=0.1, k_max=2, budget=4, min_depth=1, max_depth=2)),  # verified by match
])
def test_sampled_speculative_output_follows_the_target(verification, tree, rule):
    sampling = Sampling(temperature=0.9, top_p=0.95, verification=verification)
    target, draft = pair()
    joint = exact_two_tokens(target, sampling)
    samples = []
    for seed in range(2500):
        tokens, _ = generate_speculative(target.fresh(), draft.fresh(), PROMPT, 2,
                                         *(tree if tree else (None, None)), rule=rule, sampling=sampling, seed=seed)
        samples.append((tokens[0], tokens[1]))
    assert chi_square_p(samples, joint) > 1e-3
    # and the test has power: autoregressive samples from the *draft* are rejected
    wrong = [tuple(generate_ar(draft.fresh(), PROMPT, 2, sampling, seed)) for seed in range(2500)]
    assert chi_square_p(wrong, joint) < 1e-6


def test_sampled_drafts_that_equal_the_target_are_always_accepted():
    target, _ = pair()
    sampling = Sampling(temperature=1.0)
    _, counts = generate_speculative(target.fresh(), target.fresh(), PROMPT, 13, [-1, 0, 1, 2], [0, 0, 0, 0],
                                     sampling=sampling, seed=1)
    assert counts[3] == counts.sum()  # p = q: every candidate passes min(1, p/q) = 1


def test_top_p_keeps_the_smallest_most_likely_set():
    rng = np.random.default_rng(0)
    for _ in range(200):
        logits = rng.normal(size=7) * 2
        top_p = float(rng.uniform(0.05, 1.0))
        p = distribution(logits, Sampling(temperature=1.0, top_p=top_p))
        full = np.exp(logits - logits.max())
        full /= full.sum()
        # brute force: among all subsets with mass >= top_p, the smallest (ties: the most mass)
        best = min((s for r in range(1, 8) for s in itertools.combinations(range(7), r)
                    if full[list(s)].sum() >= top_p - 1e-12), key=lambda s: (len(s), -full[list(s)].sum()))
        assert set(np.flatnonzero(p)) == set(best)
        np.testing.assert_allclose(p[list(best)], full[list(best)] / full[list(best)].sum())


@pytest.mark.parametrize("rule", [AdaptRule(threshold=0.05, k_max=3, budget=6, min_depth=2, max_depth=4),
                                  AdaptRule(threshold=0.3, temperature=1.0, k_max=2, budget=5, min_depth=1),
                                  Eagle2Rule(top_k=3, depth=3, total_tokens=8)])
def test_dynamic_drafting_is_lossless_under_greedy(rule):
    rng = np.random.default_rng(1)
    big = ModelSpec(name="t", family="llama", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8,
                    d_ffn=64, vocab_size=24, max_positions=512)
    small = ModelSpec(name="d", family="llama", n_layers=1, d_model=16, n_heads=2, n_kv_heads=2, head_dim=8,
                      d_ffn=32, vocab_size=24, max_positions=512)
    for seed in range(12):
        prompt = [int(t) for t in rng.integers(0, 24, size=int(rng.integers(1, 6)))]
        target = Model(random_weights(big, seed=seed, scale=0.3), ReferenceConfig(big))
        draft = Model(random_weights(small, seed=seed + 100, scale=0.3), ReferenceConfig(small))
        trace: list = []
        got, counts = generate_speculative(target.fresh(), draft, prompt, 12, rule=rule, trace=trace)
        assert got == generate_ar(target.fresh(), prompt, 12)
        for record in trace:  # the rule's limits hold in every drafted tree
            drafted = len(record["parents"]) - 1
            if isinstance(rule, AdaptRule):
                assert drafted <= rule.budget
                assert max(np.bincount(depths(record["parents"]))[1:], default=0) <= rule.k_max
            else:
                assert drafted <= rule.total_tokens - 1 and max(depths(record["parents"])) <= rule.depth


def depths(parents):
    out = [0] * len(parents)
    for i in range(1, len(parents)):
        out[i] = out[parents[i]] + 1
    return out
