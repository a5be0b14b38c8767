"""Model-free drafters (issue 18): prompt lookup against a brute-force search and against
transformers' own PromptLookupCandidateGenerator, its host-CPU price (models/lookups/, measured by
benchmarks/ngram_lookup.py), what the scenarios and the exports make of it, and the lookup files'
one-line errors."""

import json
import random

import numpy as np
import pytest

from dfvg_dse.catalog import Catalog, CatalogError
from dfvg_dse.costs.work import param_counts
from dfvg_dse.reference.lookup import prompt_lookup


def brute_force_lookup(tokens: list[int], min_ngram: int, max_ngram: int, k: int) -> list[int]:
    """Every n from the longest down, every earlier start in order, compared element by element."""
    for n in range(max_ngram, min_ngram - 1, -1):
        if n >= len(tokens):
            continue
        suffix = tokens[-n:]
        for start in range(len(tokens) - n):
            if all(tokens[start + i] == suffix[i] for i in range(n)):
                return tokens[start + n:start + n + k]
    return []


def test_prompt_lookup_equals_a_brute_force_search():
    rng = random.Random(0)
    for _ in range(2000):
        tokens = [rng.randrange(rng.choice((2, 4, 12))) for _ in range(rng.randrange(1, 40))]
        low = rng.randrange(1, 4)
        high, k = rng.randrange(low, 6), rng.randrange(1, 8)
        assert prompt_lookup(tokens, low, high, k).tolist() == brute_force_lookup(tokens, low, high, k), \
            (tokens, low, high, k)


@pytest.mark.torch
def test_prompt_lookup_equals_transformers_own_generator():
    """transformers' PromptLookupCandidateGenerator (the method the hf export runs) proposes the same
    tokens as ours at min_ngram 1 whenever it finds a match."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = random.Random(1)
    matched = 0
    for _ in range(300):
        tokens = [rng.randrange(6) for _ in range(rng.randrange(3, 30))]
        high, k = rng.randrange(1, 5), rng.randrange(1, 6)
        generator = PromptLookupCandidateGenerator(num_output_tokens=k, max_matching_ngram_size=high, max_length=1000)
        ids = torch.tensor([tokens])
        candidates, _ = generator.get_candidates(ids)
        theirs = candidates[0, len(tokens):].tolist()
        assert theirs == prompt_lookup(tokens, 1, high, k).tolist(), (tokens, high, k)
        matched += bool(theirs)
    assert matched > 200  # the comparison saw proposals, not only misses


def test_a_lookup_has_no_weights_and_costs_host_seconds(catalog):
    spec = catalog.lookup_entry("prompt-lookup").spec
    draft = catalog.draft("prompt-lookup", "vicuna-7b")
    counts = param_counts(draft)
    assert draft.drafts_by_lookup and counts.read_per_forward == 0 and counts.head == 0
    assert (draft.lookup_s_per_round, draft.lookup_s_per_context_token) == \
        (spec.lookup_s_per_round, spec.lookup_s_per_context_token)
    with pytest.raises(Exception, match="name the --target"):
        catalog.draft("prompt-lookup")


def test_the_shipped_cost_is_the_benchmarks_fit():
    """models/lookups/prompt-lookup.toml's two numbers are the least-squares line through the four
    medians its cost source quotes (benchmarks/ngram_lookup.py)."""
    spec = Catalog.open().lookup_entry("prompt-lookup").spec
    contexts = np.array([256, 1024, 4096, 16384], dtype=float)
    medians_s = np.array([39.6, 68.0, 177.6, 617.1]) * 1e-6
    for context, median in zip(contexts, medians_s):
        assert f"{median * 1e6:.1f}" in spec.cost_source
    slope, intercept = np.polyfit(contexts, medians_s, 1)
    assert spec.lookup_s_per_round == pytest.approx(intercept, rel=0.01)
    assert spec.lookup_s_per_context_token == pytest.approx(slope, rel=0.01)


@pytest.mark.parametrize("context, batch", [(512, 1), (2048, 4)])
def test_estimate_prices_the_lookup_per_sequence_and_context_token(run, catalog, context, batch):
    spec = catalog.lookup_entry("prompt-lookup").spec
    out = run("estimate", "--target", "vicuna-7b", "--draft", "prompt-lookup", "--verify-device", "a100-80gb",
              "--acceptance", "0.4", "--tree", "chain:6", "--context", str(context), "--batch", str(batch), "--json")
    assert out.exit_code == 0, out.output
    draft = json.loads(out.stdout)["stages"]["draft"]
    assert draft["bound"] == "lookup"
    expected = batch * (spec.lookup_s_per_round + spec.lookup_s_per_context_token * context)
    assert draft["time_s"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("args, message", [
    (["--tree", "kary:2x2"], "chain"),
    (["--tree", "chain:4", "--draft-device", "v80"], "host CPU"),
    (["--dynamic", "adapt"], "a lookup drafter proposes one continuation"),
    (["--tree", "chain:4", "--schedule", "overlap"], "drafts after verification"),
])
def test_what_a_lookup_cannot_do_is_refused_in_one_line(run, args, message):
    out = run("estimate", "--target", "vicuna-7b", "--draft", "prompt-lookup", "--verify-device", "a100-80gb",
              "--acceptance", "0.4", *args)
    assert out.exit_code == 2, out.output
    line = out.output.strip()
    assert "\n" not in line and "Traceback" not in line and message in line, line


def test_compare_places_a_lookup_on_the_verifiers_host_only(run):
    out = run("compare", "--target", "vicuna-7b", "--draft", "prompt-lookup", "--acceptance", "0.4", "--json")
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    rows = rows["scenarios"] if isinstance(rows, dict) else rows
    feasible = {r["name"] for r in rows if r["feasible"]}
    assert feasible and feasible <= {"sps", "specinfer", "ar"}
    for row in rows:
        if not row["feasible"]:
            assert "host CPU" in row["reason"], row


@pytest.mark.parametrize("edit, message", [
    (("min_ngram = 1", "min_ngram = 0"), "drafter.min_ngram' = 0: must be an integer >= 1"),
    (("min_ngram = 1", "min_ngram = 4"), "drafter.min_ngram' = 4: must be <= max_ngram (3)"),
    (("max_ngram = 3", "max_ngram = \"3\""), "drafter.max_ngram' = '3': must be an integer"),
    (("kind = \"ngram\"", "kind = \"trie\""), "drafter.kind' = 'trie': allowed: ngram, suffix"),
    (("[drafter]", "[drafter]\nlayers = 2"), "drafter.layers' = 2: unknown key"),
    (("lookup_s_per_round = ", "lookup_s_per_round = -1.0 # "), "cost.lookup_s_per_round' = -1: must be a finite"),
    (("lookup_s_per_context_token = ", "lookup_s_per_context_token = nan # "), "cost.lookup_s_per_context_token"),
    (("name = \"prompt-lookup\"", "name = \"other\""), "must equal the file name 'prompt-lookup'"),
])
def test_a_bad_lookup_file_is_one_line(models_copy, edit, message):
    path = models_copy / "lookups" / "prompt-lookup.toml"
    text = path.read_text()
    assert edit[0] in text
    path.write_text(text.replace(*edit, 1))
    with pytest.raises(CatalogError) as err:
        Catalog.open(models_dir=models_copy).lookup_entry("prompt-lookup")
    text = str(err.value)
    assert "\n" not in text and str(path) in text and message in text, text


def test_models_lookups_and_show_from_the_command_line(run, catalog):
    listed = run("models", "lookups", "--json")
    assert listed.exit_code == 0, listed.output
    records = {r["name"]: r for r in json.loads(listed.stdout)}
    spec = catalog.lookup_entry("prompt-lookup").spec
    assert records["prompt-lookup"]["params"] == 0
    assert (records["prompt-lookup"]["min_ngram"], records["prompt-lookup"]["max_ngram"]) == \
        (spec.min_ngram, spec.max_ngram)
    shown = run("models", "show", "prompt-lookup")
    assert shown.exit_code == 0 and "ngram drafter, for any target" in shown.stdout


@pytest.fixture(scope="module")
def lookup_exports(tmp_path_factory):
    """A search drafting by prompt lookup for Vicuna-7B on an A100, and its knee in every engine's format."""
    from click.testing import CliRunner
    from dfvg_dse.cli import cli
    runs = tmp_path_factory.mktemp("lookup-runs")
    runner = CliRunner()
    searched = runner.invoke(cli, ["search", "--target", "vicuna-7b", "--draft", "prompt-lookup", "--acceptance", "0.4",
                                   "--verify-device", "a100-80gb", "--draft-device", "a100-80gb",
                                   "--results-dir", str(runs), "--run-id", "p", "--json"])
    assert searched.exit_code == 0, searched.output
    exports = {}
    for fmt in ("vllm", "sglang", "hf", "trtllm", "json"):
        out = runner.invoke(cli, ["export", str(runs / "p"), "--format", fmt, "--json"])
        assert out.exit_code == 0, out.output
        exports[fmt] = json.loads(out.stdout)
    return exports


def test_a_lookup_exports_by_each_engines_ngram_method(lookup_exports, catalog):
    spec = catalog.lookup_entry("prompt-lookup").spec
    depth = lookup_exports["vllm"]["realised"]["depth"]
    assert lookup_exports["json"]["drafter"] == "ngram"
    assert lookup_exports["vllm"]["llm_kwargs"]["speculative_config"] == {
        "method": "ngram", "num_speculative_tokens": depth, "prompt_lookup_min": spec.min_ngram,
        "prompt_lookup_max": spec.max_ngram}
    sglang = lookup_exports["sglang"]["server_args"]
    assert sglang["speculative_algorithm"] == "NGRAM" and "speculative_draft_model_path" not in sglang
    assert sglang["speculative_num_draft_tokens"] == lookup_exports["sglang"]["realised"]["depth"] + 1
    assert sglang["speculative_ngram_max_bfs_breadth"] == 1 and "speculative_eagle_topk" not in sglang
    assert any("trie" in c for c in lookup_exports["sglang"]["changes"])
    hf = lookup_exports["hf"]
    assert hf["generate_kwargs"]["prompt_lookup_num_tokens"] == hf["realised"]["depth"]
    assert hf["generate_kwargs"]["max_matching_ngram_size"] == spec.max_ngram and "assistant" not in hf["python"]
    trt = json.loads(lookup_exports["trtllm"]["yaml"])["speculative_config"]
    assert trt == {"decoding_type": "NGram", "max_draft_len": lookup_exports["trtllm"]["realised"]["depth"],
                   "max_matching_ngram_size": spec.max_ngram}


@pytest.mark.torch
def test_the_hf_lookup_snippet_runs_transformers_prompt_lookup(lookup_exports, monkeypatch):
    """The exported snippet, its target swapped for the shipped tiny byte-level Llama, generates with
    transformers' PromptLookupCandidateGenerator at the exported draft length; greedy, so the text
    equals the target's own."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator
    from tests.deploy.test_hf_assisted import PAIR, ByteTokenizer

    seen = []
    original = PromptLookupCandidateGenerator.get_candidates

    def recording(self, input_ids, **kwargs):
        seen.append((self.num_output_tokens, self.max_matching_ngram_size))
        return original(self, input_ids, **kwargs)
    monkeypatch.setattr(PromptLookupCandidateGenerator, "get_candidates", recording)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: ByteTokenizer())
    export = lookup_exports["hf"]
    code = export["python"].replace(repr(export["models"]["target"]), repr(str(PAIR / "target")))
    code = code.replace(f"max_new_tokens={export['generate_kwargs']['max_new_tokens']}", "max_new_tokens=30")
    code = code.replace("torch.float16", "torch.float32").replace("torch.bfloat16", "torch.float32")
    namespace = {}
    exec(compile(code, "export-snippet", "exec"), namespace)
    promised = (export["generate_kwargs"]["prompt_lookup_num_tokens"], export["generate_kwargs"]["max_matching_ngram_size"])
    assert seen and set(seen) == {promised}
    output = namespace["output"]
    target = transformers.AutoModelForCausalLM.from_pretrained(PAIR / "target")
    prompt = output[:, :len(b"def fibonacci(n):")]
    alone = target.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                            max_new_tokens=output.shape[1] - prompt.shape[1])
    assert torch.equal(alone, output)
