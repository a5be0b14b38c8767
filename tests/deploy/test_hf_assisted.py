"""The transformers export run by transformers itself (issue 15): the exported Python snippet, with
its models replaced by the shipped tiny trained pair (models/reference: byte-level Llama
checkpoints), generates with assisted generation, and every round drafts the number of tokens the
export promises. Without the export's assistant settings (transformers' defaults) the drafts have
other lengths, so the check can fail. Skipped without torch (pip install '.[hf]'); CI installs it."""

import copy
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers.generation.candidate_generator import AssistedCandidateGenerator  # noqa: E402

pytestmark = pytest.mark.torch
PAIR = Path(__file__).parents[2] / "models" / "reference"
GET_CANDIDATES = AssistedCandidateGenerator.get_candidates  # transformers' own, before any test wraps it


class ByteTokenizer:
    """What the snippet asks of a tokenizer, for the byte-level pair (its ids are the bytes)."""

    def __call__(self, texts, return_tensors="pt"):
        ids = torch.tensor([list(t.encode()) for t in texts])
        return transformers.BatchEncoding({"input_ids": ids, "attention_mask": torch.ones_like(ids)})

    def decode(self, ids, skip_special_tokens=True):
        return bytes(int(i) for i in ids).decode(errors="replace")


def run_snippet(config: dict, monkeypatch, max_new_tokens: int = 40, keep_assistant_defaults: bool = False):
    """Execute the export's snippet on the tiny pair; the drafted tokens of every round and the
    room left under max_length when it was drafted."""
    drafted = []

    def recording(self, input_ids, **kwargs):
        candidates, logits = GET_CANDIDATES(self, input_ids, **kwargs)
        drafted.append((candidates.shape[1] - input_ids.shape[1],
                        self.main_model_max_length - input_ids.shape[1] - 1))
        return candidates, logits
    monkeypatch.setattr(AssistedCandidateGenerator, "get_candidates", recording)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: ByteTokenizer())
    code = config["python"].replace(repr(config["models"]["target"]), repr(str(PAIR / "target")))
    code = code.replace(repr(config["models"]["assistant"]), repr(str(PAIR / "draft")))
    code = code.replace(f"max_new_tokens={config['generate_kwargs']['max_new_tokens']}",
                        f"max_new_tokens={max_new_tokens}")
    code = code.replace("torch.float16", "torch.float32").replace("torch.bfloat16", "torch.float32")  # CPU
    if keep_assistant_defaults:
        code = "\n".join(line for line in code.splitlines() if not line.startswith("assistant.generation_config."))
    namespace = {}
    exec(compile(code, "export-snippet", "exec"), namespace)
    return drafted, namespace["output"]


def test_assisted_generation_drafts_what_every_export_promises(default_exports, monkeypatch):
    """The 23 designs' exports (picks and random trials of the default search), each run once per
    distinct snippet: every round drafts the promised length (less only where max_length stops it)."""
    snippets = {}
    for name, export in default_exports["hf"]:
        assert export["realised"]["batch"] == 1 and export["realised"]["family"] == "chain", name
        assert export["assistant_generation_config"]["num_assistant_tokens"] == export["realised"]["depth"], name
        snippets.setdefault(export["python"], export)
    for export in snippets.values():
        promised = export["assistant_generation_config"]["num_assistant_tokens"]
        drafted, output = run_snippet(copy.deepcopy(export), monkeypatch)
        assert len(drafted) >= 3 and output.shape[0] == 1
        assert [n for n, _ in drafted] == [min(promised, room) for _, room in drafted]
    # greedy assisted generation is lossless: the target alone writes the same text
    target = transformers.AutoModelForCausalLM.from_pretrained(PAIR / "target")
    prompt = output[:, :len(b"def fibonacci(n):")]
    alone = target.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                            max_new_tokens=output.shape[1] - prompt.shape[1])
    assert torch.equal(alone, output)


def test_without_the_exported_assistant_settings_drafts_differ(default_exports, monkeypatch):
    hf_export = default_exports["hf"][0][1]
    promised = hf_export["assistant_generation_config"]["num_assistant_tokens"]
    drafted, _ = run_snippet(copy.deepcopy(hf_export), monkeypatch, keep_assistant_defaults=True)
    # transformers' defaults (20 tokens, confidence threshold 0.4) draft other lengths than the design's
    assert [n for n, _ in drafted] != [min(promised, room) for _, room in drafted]


def test_prompt_lookup_export_drafts_by_lookup_and_stays_lossless(tmp_path, monkeypatch):
    """A prompt-lookup search's transformers export (no assistant: generate's prompt_lookup_num_tokens)
    run on the tiny target: transformers' PromptLookupCandidateGenerator drafts every round, never more
    than the design's depth, at least once the full depth, and the text equals the target's alone."""
    import json
    from click.testing import CliRunner
    from dfvg_dse.cli import cli
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    runner = CliRunner()
    assert runner.invoke(cli, ["search", "--target", "qwen3-8b", "--draft", "prompt-lookup", "--acceptance", "0.4",
                               "--results-dir", str(tmp_path), "--run-id", "n"]).exit_code == 0
    export = json.loads(runner.invoke(cli, ["export", str(tmp_path / "n"), "--format", "hf", "--json"]).stdout)
    assert "assistant" not in export["models"]
    promised = export["generate_kwargs"]["prompt_lookup_num_tokens"]
    lookup_candidates, drafted = PromptLookupCandidateGenerator.get_candidates, []

    def recording(self, input_ids, **kwargs):
        candidates, logits = lookup_candidates(self, input_ids, **kwargs)
        drafted.append(candidates.shape[1] - input_ids.shape[1])
        return candidates, logits
    monkeypatch.setattr(PromptLookupCandidateGenerator, "get_candidates", recording)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: ByteTokenizer())
    code = export["python"].replace(repr(export["models"]["target"]), repr(str(PAIR / "target")))
    code = code.replace(f"max_new_tokens={export['generate_kwargs']['max_new_tokens']}", "max_new_tokens=120")
    code = code.replace("torch.float16", "torch.float32").replace("torch.bfloat16", "torch.float32")
    namespace = {}
    exec(compile(code, "export-snippet", "exec"), namespace)
    output = namespace["output"]
    assert len(drafted) >= 3 and max(drafted) == promised and all(0 <= n <= promised for n in drafted)
    target = transformers.AutoModelForCausalLM.from_pretrained(PAIR / "target")
    prompt = output[:, :len(b"def fibonacci(n):")]
    alone = target.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                            max_new_tokens=output.shape[1] - prompt.shape[1])
    assert torch.equal(alone, output)
