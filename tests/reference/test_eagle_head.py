"""The shipped EAGLE-style draft head in the running reference decoder (issue 18, Deliver 5;
dfvg_dse/reference/eagle.py, models/reference/eagle): its numpy forward against the torch modules it
was trained as, lossless greedy decoding with it (in one process and in two), the link traffic
against the cost model's formula for heads, and its acceptance against the teacher-forced replay."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dfvg_dse.acceptance.replay import replay_greedy_run
from dfvg_dse.catalog import Catalog, CatalogError
from dfvg_dse.catalog.checkpoints import forward_settings
from dfvg_dse.cli import cli
from dfvg_dse.costs.stages import round_link_bytes
from dfvg_dse.reference.eagle import HeadModel, pack_head
from dfvg_dse.reference.speculative import TOKEN_RECORD_BYTES, Model, generate_ar, generate_speculative
from dfvg_dse.reference.stages import Job, StageError, TwoStageRuntime
from dfvg_dse.reference.teacher import teacher_forced_acceptance
from dfvg_dse.reference.tiny_lm import ReferenceConfig
from dfvg_dse.specs.decoding import AdaptRule, Eagle2Rule
from dfvg_dse.tree import chain, kary

PAIR = Path(__file__).parents[2] / "models" / "reference"


def _model(role: str) -> Model:
    config, spec, tensors, path = Catalog.read_checkpoint("builtin:tiny", role)
    rope, eps = forward_settings(path, config, spec)
    return Model(tensors, ReferenceConfig(spec, rope=rope, rms_norm_eps=eps))


@pytest.fixture(scope="module")
def models():
    target = _model("target")
    config, spec, tensors, path = Catalog.read_head("builtin:tiny-eagle")
    rope, eps = forward_settings(path, config, spec)
    head_config = ReferenceConfig(spec, rope=rope, rms_norm_eps=eps)
    return target, HeadModel(pack_head(tensors, head_config, target.weights), head_config), _model("draft")


@pytest.fixture(scope="module")
def prompts():
    lines = [json.loads(line) for line in (PAIR / "prompts.jsonl").read_text().splitlines()]
    return [list(p["text"].encode()) for p in lines if p["split"] == "held-out"][:6]


@pytest.mark.torch
def test_the_numpy_head_is_the_torch_head_it_was_trained_as(models):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import sys
    sys.path.insert(0, str(PAIR))
    from train_head import build, head_forward, target_features
    from safetensors.torch import load_file

    target_hf = transformers.LlamaForCausalLM.from_pretrained(PAIR / "target").eval()
    _, fc, layer = build(target_hf)
    state = load_file(str(PAIR / "eagle" / "model.safetensors"))
    fc.load_state_dict({"weight": state["fc.weight"], "bias": state["fc.bias"]})
    layer.load_state_dict({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}, strict=False)
    ids = torch.tensor([list(b"def add(a, b):\n    return a + b\n")])
    with torch.no_grad():
        features, _ = target_features(target_hf, ids)
        expected = head_forward(target_hf, fc, layer, ids[:, 1:], features[:, :-1])[0].numpy()
        expected_logits = target_hf.lm_head(torch.from_numpy(expected)).numpy()
    _, head, _ = models
    head = head.fresh()
    head.add_features(features[0].numpy())
    tokens = ids[0].tolist()
    logits = head.run(tokens[1:], np.arange(1, len(tokens)))  # row p reads f_{p-1}
    predicted = head.fresh()
    predicted.add_features(features[0].numpy())
    _, mine = predicted.run_rows(tokens[1:2], [1], features[0, :1].numpy(), np.zeros((1, 0), dtype=bool))
    assert np.max(np.abs(logits - expected_logits)) < 1e-4
    assert np.max(np.abs(mine[0] - expected[0])) < 1e-5


@pytest.mark.parametrize("rule", [chain(4), kary(2, 2), AdaptRule(threshold=0.1, k_max=4, budget=8, max_depth=6),
                                  Eagle2Rule(top_k=4, depth=4, total_tokens=12)],
                         ids=["chain4", "kary2x2", "adapt", "eagle2"])
def test_greedy_decoding_with_the_head_is_lossless(models, prompts, rule):
    target, head, _ = models
    for prompt in prompts[:3]:
        kwargs = {"rule": rule} if not hasattr(rule, "parents") else {"parents": rule.parents, "ranks": rule.ranks}
        out, counts = generate_speculative(target.fresh(), head.fresh(), prompt, 48, **kwargs)
        assert out == generate_ar(target.fresh(), prompt, 48)
        assert counts.sum() > 0


def test_two_stages_carry_the_features_the_cost_model_prices(models, prompts):
    """Bytes on the link per round: the tree's records down, and per token of the round (the
    accepted ones and the bonus) a record and d x 2 bytes of target features up: costs/stages.py's
    round_link_bytes with feature_bytes = d x 2, summed over the rounds the run had."""
    target, head, _ = models
    tree = chain(4)
    d = head.config.spec.d_model
    with TwoStageRuntime(target, head) as runtime:
        for prompt in prompts[:2]:
            result = runtime.run(Job(tuple(prompt), 48, (tuple(tree.parents), tuple(tree.ranks))))
            assert result.tokens == generate_ar(target.fresh(), prompt, 48)
            counts = np.asarray(result.accept_counts)
            down, up = round_link_bytes(len(tree.parents) - 1, np.arange(len(counts)) + 1, TOKEN_RECORD_BYTES,
                                        feature_bytes=2 * d)
            assert result.link_bytes == int(np.dot(counts, down + up))
            assert result.link_bytes > np.dot(counts, np.arange(len(counts)) + 1) * 2 * d  # features dominate


def test_the_head_accepts_what_the_teacher_forced_replay_predicts(models, prompts):
    """Tokens per round of greedy chain:4 decoding, measured, against the replay of the head's
    teacher-forced ranks (true target features at every position; drafting past the first level
    reads the head's own predictions instead): within 3% here. The head also beats the shipped
    draft model at it (the training's purpose)."""
    target, head, draft = models
    tree, n = chain(4), 96
    measured, predicted = {}, {}
    for name, model in (("head", head), ("draft", draft)):
        tokens = rounds = replay_tokens = replay_rounds = 0
        for prompt in prompts:
            out, counts = generate_speculative(target.fresh(), model.fresh(), prompt, n, tree.parents, tree.ranks)
            rounds += counts.sum()
            tokens += np.dot(np.arange(len(counts)) + 1, counts)
            trace = teacher_forced_acceptance(target.fresh(), model.fresh(), prompt, n + 8)
            t, r, _ = replay_greedy_run(tree, trace["ranks"], n)
            replay_tokens, replay_rounds = replay_tokens + t, replay_rounds + r
        measured[name], predicted[name] = tokens / rounds, replay_tokens / replay_rounds
    assert abs(measured["head"] / predicted["head"] - 1) < 0.03
    assert measured["head"] > measured["draft"] * 1.1


def test_a_head_drafts_in_turn(models, prompts):
    target, head, _ = models
    tree = chain(3)
    with TwoStageRuntime(target, head) as runtime:
        with pytest.raises(StageError, match="drafts in turn"):
            runtime.run(Job(tuple(prompts[0]), 16, (tuple(tree.parents), tuple(tree.ranks)), schedule="overlap"))
    result = CliRunner().invoke(cli, ["reference", "generate", "--draft", "builtin:tiny-eagle", "--mode", "spec",
                                      "--prompt", "def f(x):", "--tree", "chain:3", "--schedule", "overlap"])
    assert result.exit_code == 2 and "drafts in turn" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_generate_with_the_head_reports_its_feature_traffic():
    result = CliRunner().invoke(cli, ["reference", "generate", "--draft", "builtin:tiny-eagle", "--mode", "spec",
                                      "--prompt", "import os\n", "--max-new-tokens", "32", "--tree", "chain:3",
                                      "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["link_bytes"] > 256 * 2 * record["rounds"]  # at least one feature row a round


def test_a_damaged_head_folder_is_one_line(tmp_path):
    folder = tmp_path / "head"
    folder.mkdir()
    config = json.loads((PAIR / "eagle" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config))
    from safetensors.numpy import load_file, save_file
    tensors = load_file(str(PAIR / "eagle" / "model.safetensors"))
    del tensors["fc.bias"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(CatalogError, match="tensor 'fc.bias' missing"):
        Catalog.read_head(folder)
    result = CliRunner().invoke(cli, ["reference", "generate", "--draft", str(folder), "--mode", "spec",
                                      "--prompt", "x = 1", "--tree", "chain:2"])
    assert result.exit_code == 2 and "fc.bias" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_heads_parameters_are_those_of_its_structure():
    """fc 2d x d + d, one llama layer (q, k, v, o of d x d at 4 heads of 64; gate, up, down of d x F;
    two norms), a final norm: counted from the widths, against the file and its training record."""
    config, spec, tensors, _ = Catalog.read_head("builtin:tiny-eagle")
    d, f = spec.d_model, spec.d_ffn
    expected = (2 * d * d + d) + (4 * d * d + 3 * d * f + 2 * d) + d
    assert sum(v.size for v in tensors.values()) == expected == 922_624
    assert json.loads((PAIR / "eagle" / "training.json").read_text())["parameters"] == expected
