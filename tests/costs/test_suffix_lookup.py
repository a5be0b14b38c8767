"""Suffix decoding as a model-free drafter (issue 18): the suffix tree's proposal against a brute-force
count over the sequence, incremental against built-at-once, its host-CPU price (models/lookups/,
measured by benchmarks/suffix_lookup.py), what estimate and the exports make of it (vLLM `suffix`;
the engines without a suffix method refuse), and its file's one-line errors."""

import json
import random

import numpy as np
import pytest

from dfvg_dse.catalog import Catalog, CatalogError
from dfvg_dse.reference.lookup import SuffixTrie, suffix_speculate


def brute_force_suffix(tokens: list[int], depth: int, k: int, factor: float, floor: float) -> list[int]:
    """Every match length m: the positions where the last m tokens start (the last one included), then
    token by token the most frequent next token among them (ties: the smaller id), its probability the
    running product of (positions continuing with it) / (positions); the best sum of probabilities wins,
    the longer match on a tie. Match plus draft within `depth` tokens."""
    n = len(tokens)
    best, best_score = [], 0.0
    for m in range(1, min(depth, n)):
        pattern = tokens[n - m:]
        starts = [j for j in range(n - m + 1) if tokens[j:j + m] == pattern]
        limit = max(0, min(k, int(factor * m + 1e-6)))
        draft, prob, score, t = [], 1.0, 0.0, 0
        while len(draft) < limit and m + t + 1 <= depth:
            nexts = [tokens[j + m + t] for j in starts if j + m + t < n]
            if not nexts:
                break
            counts = {}
            for token in nexts:
                counts[token] = counts.get(token, 0) + 1
            token = min(counts, key=lambda x: (-counts[x], x))
            prob *= counts[token] / len(starts)
            if prob < floor:
                break
            draft.append(token)
            score += prob
            starts = [j for j in starts if j + m + t < n and tokens[j + m + t] == token]
            t += 1
        if score >= best_score:
            best, best_score = draft, score
    return best


def test_the_suffix_tree_proposes_what_a_brute_force_count_does():
    rng = random.Random(0)
    for _ in range(1500):
        tokens = [rng.randrange(rng.choice((2, 3, 6))) for _ in range(rng.randrange(1, 45))]
        depth, k = rng.randrange(2, 12), rng.randrange(1, 10)
        factor, floor = rng.choice((0.5, 1.0, 2.0, 4.0)), rng.choice((0.0, 0.1, 0.3, 0.6))
        assert suffix_speculate(tokens, depth, k, factor, floor) == brute_force_suffix(tokens, depth, k, factor, floor), \
            (tokens, depth, k, factor, floor)


def test_appending_tokens_round_by_round_equals_building_at_once():
    rng = random.Random(1)
    tokens = [rng.randrange(5) for _ in range(300)]
    trie, at = SuffixTrie(8), 0
    while at < len(tokens):
        step = rng.randrange(1, 6)
        trie.extend(tokens[at:at + step])
        at += step
        assert trie.speculate(7, 1.5, 0.1) == suffix_speculate(tokens[:at], 8, 7, 1.5, 0.1)
    with pytest.raises(ValueError, match="max_depth"):
        SuffixTrie(1)


def test_a_repeated_text_is_drafted_in_full_and_a_fresh_one_not_at_all():
    text = list(range(30))
    assert suffix_speculate(text + text[:10], 24, 20) == text[10:20]  # a 10-token match: up to 10 tokens
    assert suffix_speculate(text, 24, 20) == []


def test_the_shipped_cost_is_the_benchmarks_fit():
    """models/lookups/suffix-decoding.toml's numbers: the least-squares line through the four medians its
    cost source quotes (benchmarks/suffix_lookup.py), the slope clipped at 0."""
    spec = Catalog.open().lookup_entry("suffix-decoding").spec
    contexts = np.array([256, 1024, 4096, 16384], dtype=float)
    medians_s = np.array([49.2, 49.4, 48.7, 49.0]) * 1e-6
    for median in medians_s:
        assert f"{median * 1e6:.1f}" in spec.cost_source
    slope, intercept = np.polyfit(contexts, medians_s, 1)
    assert spec.lookup_s_per_round == pytest.approx(intercept, rel=0.01)
    assert spec.lookup_s_per_context_token == max(0.0, slope)
    assert spec.params == {"kind": "suffix", "max_tree_depth": 24, "max_spec_factor": 1.0, "min_token_prob": 0.1}
    assert spec.max_draft_depth == 23


def test_estimate_prices_a_suffix_round_on_the_host_and_refuses_a_round_past_the_tree(run, catalog):
    spec = catalog.lookup_entry("suffix-decoding").spec
    out = run("estimate", "--target", "vicuna-7b", "--draft", "suffix-decoding", "--verify-device", "a100-80gb",
              "--acceptance", "0.6", "--tree", "chain:12", "--batch", "2", "--json")
    assert out.exit_code == 0, out.output
    draft = json.loads(out.stdout)["stages"]["draft"]
    assert draft["bound"] == "lookup" and draft["time_s"] == pytest.approx(2 * spec.lookup_s_per_round, rel=1e-9)
    for args, message in ((["--tree", "chain:24"], "drafts at most 23 positions a round"),
                          (["--tree", "kary:2x2"], "chain"), (["--dynamic", "adapt"], "one continuation")):
        out = run("estimate", "--target", "vicuna-7b", "--draft", "suffix-decoding", "--verify-device", "a100-80gb",
                  "--acceptance", "0.6", *args)
        line = out.output.strip()
        assert out.exit_code == 2 and "\n" not in line and message in line, line


@pytest.fixture(scope="module")
def suffix_run(tmp_path_factory):
    from click.testing import CliRunner
    from dfvg_dse.cli import cli
    runs = tmp_path_factory.mktemp("suffix-runs")
    runner = CliRunner()
    searched = runner.invoke(cli, ["search", "--target", "vicuna-7b", "--draft", "suffix-decoding", "--acceptance", "0.6",
                                   "--verify-device", "a100-80gb", "--draft-device", "a100-80gb",
                                   "--results-dir", str(runs), "--run-id", "s", "--json"])
    assert searched.exit_code == 0, searched.output
    return runner, cli, runs / "s"


def test_a_suffix_lookup_exports_to_vllm_suffix_and_the_others_refuse(suffix_run, catalog):
    runner, cli, run_dir = suffix_run
    spec = catalog.lookup_entry("suffix-decoding").spec
    out = runner.invoke(cli, ["export", str(run_dir), "--format", "vllm", "--json"])
    assert out.exit_code == 0, out.output
    export = json.loads(out.stdout)
    depth = export["realised"]["depth"]
    assert 1 <= depth <= spec.max_draft_depth
    assert export["llm_kwargs"]["speculative_config"] == {
        "method": "suffix", "num_speculative_tokens": depth, "suffix_decoding_max_tree_depth": 24,
        "suffix_decoding_max_spec_factor": 1.0, "suffix_decoding_min_token_prob": 0.1}
    assert "model" not in export["llm_kwargs"]["speculative_config"]
    assert any("global tree" in c for c in export["changes"]) and not any("dtype" in c for c in export["changes"])
    for fmt in ("sglang", "hf", "trtllm"):
        out = runner.invoke(cli, ["export", str(run_dir), "--format", fmt])
        line = out.output.strip()
        assert out.exit_code == 2 and "\n" not in line and "runs no method for" in line and "suffix lookup" in line, line


@pytest.mark.parametrize("edit, message", [
    (("max_tree_depth = 24", "max_tree_depth = 1"), "drafter.max_tree_depth' = 1: must be >= 2"),
    (("min_token_prob = 0.1", "min_token_prob = 1.5"), "drafter.min_token_prob' = 1.5: must be a probability"),
    (("max_spec_factor = 1.0", "max_spec_factor = 0.0"), "drafter.max_spec_factor' = 0: must be a finite number > 0"),
    (("[drafter]", "[drafter]\nmin_ngram = 2"), "drafter.min_ngram' = 2: unknown key"),
    (("kind = \"suffix\"", "kind = \"ngram\""), "unknown key; allowed: kind, min_ngram, max_ngram"),
    (("kind = \"suffix\"", "kind = \"trie\""), "drafter.kind' = 'trie': allowed: ngram, suffix"),
    (("max_tree_depth = 24\n", ""), "drafter.max_tree_depth"),
])
def test_a_bad_suffix_file_is_one_line(models_copy, edit, message):
    path = models_copy / "lookups" / "suffix-decoding.toml"
    text = path.read_text()
    assert edit[0] in text
    path.write_text(text.replace(*edit, 1))
    with pytest.raises(CatalogError) as err:
        Catalog.open(models_dir=models_copy).lookup_entry("suffix-decoding")
    text = str(err.value)
    assert "\n" not in text and str(path) in text and message in text, text
