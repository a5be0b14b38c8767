"""Checkpoint folders (config.json + safetensors) through `dfvg-dse reference generate`."""

import json
import re

import pytest
from click.testing import CliRunner
from safetensors.numpy import save_file

from dfvg_dse.catalog import CatalogError
from dfvg_dse.catalog.checkpoints import read_checkpoint
from dfvg_dse.cli import cli
from dfvg_dse.reference import random_weights
from dfvg_dse.specs import ModelSpec


def write_checkpoint(folder, spec: ModelSpec, seed: int, shards: int = 1, drop: str | None = None,
                     reshape: str | None = None):
    folder.mkdir(parents=True)
    config = {"model_type": spec.family, "hidden_size": spec.d_model, "intermediate_size": spec.d_ffn,
              "num_hidden_layers": spec.n_layers, "num_attention_heads": spec.n_heads,
              "num_key_value_heads": spec.n_kv_heads, "head_dim": spec.head_dim, "vocab_size": spec.vocab_size,
              "max_position_embeddings": spec.max_positions, "tie_word_embeddings": spec.tied_embeddings,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "torch_dtype": "float32"}
    if spec.family == "opt":
        config.update({"ffn_dim": spec.d_ffn, "do_layer_norm_before": True, "activation_function": "relu"})
    (folder / "config.json").write_text(json.dumps(config))
    weights = random_weights(spec, seed=seed, scale=0.3)
    if drop:
        weights.pop(drop)
    if reshape:
        weights[reshape] = weights[reshape][:-1]
    names = sorted(weights)
    for i in range(shards):  # sharded like large Hugging Face checkpoints
        part = {n: weights[n] for n in names[i::shards]}
        save_file(part, str(folder / f"model-{i + 1:05d}-of-{shards:05d}.safetensors"))


TARGET = ModelSpec(name="t", family="llama", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ffn=64,
                   vocab_size=24, max_positions=512)
DRAFT = ModelSpec(name="d", family="llama", n_layers=1, d_model=16, n_heads=2, n_kv_heads=2, head_dim=8, d_ffn=32,
                  vocab_size=24, max_positions=512)
OPT_TARGET = ModelSpec(name="ot", family="opt", n_layers=2, d_model=32, n_heads=4, n_kv_heads=4, head_dim=8,
                       d_ffn=64, vocab_size=24, max_positions=512, gated_ffn=False, norm="layer",
                       tied_embeddings=True, qkv_bias=True, o_bias=True, ffn_bias=True)
OPT_DRAFT = ModelSpec(name="od", family="opt", n_layers=1, d_model=16, n_heads=2, n_kv_heads=2, head_dim=8,
                      d_ffn=32, vocab_size=24, max_positions=512, gated_ffn=False, norm="layer",
                      tied_embeddings=True, qkv_bias=True, o_bias=True, ffn_bias=True)


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("target, draft", [(TARGET, DRAFT), (OPT_TARGET, OPT_DRAFT)], ids=["llama", "opt"])
def test_generate_speculative_equals_autoregressive_from_checkpoints(run, tmp_path, target, draft):
    write_checkpoint(tmp_path / "target", target, seed=1, shards=2)
    write_checkpoint(tmp_path / "draft", draft, seed=2)
    ar = json.loads(run("reference", "generate", "--target", str(tmp_path / "target"), "--prompt-ids", "1,2,3",
                        "--max-new-tokens", "16", "--mode", "ar", "--json").stdout)
    spec = run("reference", "generate", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
               "--prompt-ids", "1,2,3", "--max-new-tokens", "16", "--tree", "kary:2x2", "--json")
    assert spec.exit_code == 0, spec.stderr
    out = json.loads(spec.stdout)
    assert out["tokens"] == ar["tokens"] and len(out["tokens"]) == 16
    assert out["rounds"] == sum(out["accept_counts"]) and 0 <= out["mean_accepted_per_round"] <= 2
    assert out["tokens_per_s"] > 0


@pytest.mark.parametrize("problem, message", [
    ({"drop": "model.layers.1.mlp.up_proj.weight"}, "tensor 'model.layers.1.mlp.up_proj.weight' missing"),
    ({"reshape": "model.norm.weight"}, "tensor 'model.norm.weight' has shape (31,); config.json implies (32,)"),
])
def test_bad_checkpoints_are_one_line(run, tmp_path, problem, message):
    write_checkpoint(tmp_path / "bad", TARGET, seed=1, **problem)
    result = run("reference", "generate", "--target", str(tmp_path / "bad"), "--prompt-ids", "1", "--mode", "ar")
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unknown_family_and_bad_prompt(run, tmp_path):
    base = {"hidden_size": 16, "ffn_dim": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10,
            "max_position_embeddings": 32}
    for name, config, message in [
            ("gpt2", {"model_type": "gpt2", **base}, "model_type"),
            ("opt350m", {"model_type": "opt", "do_layer_norm_before": False, **base}, "post-LN OPT")]:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        result = run("reference", "generate", "--target", str(folder), "--prompt-ids", "1", "--mode", "ar")
        assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    write_checkpoint(tmp_path / "ok", TARGET, seed=1)
    bad = run("reference", "generate", "--target", str(tmp_path / "ok"), "--prompt-ids", "1,99", "--mode", "ar")
    assert bad.exit_code == 2 and "every token id must be in 0..23" in bad.stderr


def test_trace_agrees_with_the_run_and_feeds_the_acceptance_fit(run, tmp_path):
    write_checkpoint(tmp_path / "target", TARGET, seed=1)
    write_checkpoint(tmp_path / "draft", DRAFT, seed=2)
    trace = tmp_path / "trace.jsonl"
    result = run("reference", "generate", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
                 "--prompt-ids", "1,2,3", "--max-new-tokens", "40", "--tree", "seq:2x2", "--trace", str(trace),
                 "--json")
    out = json.loads(result.stdout)
    rounds = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(rounds) == out["rounds"] and [r["round"] for r in rounds] == list(range(len(rounds)))
    kept = [len(r["accepted"]) - 1 for r in rounds]
    assert [kept.count(k) for k in range(len(out["accept_counts"]))] == out["accept_counts"]
    for r in rounds:
        path = r["accepted"]
        assert path[0] == 0 and all(r["parents"][b] == a for a, b in zip(path, path[1:]))
        assert all(0 < c <= 1 for c in r["confidences"])
        # siblings are the draft's ranked choices: a lower rank never has a lower probability
        for i, j in zip(range(1, len(r["parents"])), range(2, len(r["parents"]))):
            if r["parents"][i] == r["parents"][j] and r["ranks"][i] < r["ranks"][j]:
                assert r["confidences"][i] >= r["confidences"][j]
        assert r["draft_start_s"] <= r["draft_end_s"] <= r["verify_start_s"] <= r["verify_end_s"]
        assert r["link_bytes"] == 16 * (len(r["parents"]) - 1 + len(path))
    # the fit reads it: its rank-0 acceptance is the share of accepted nodes whose rank-0 child was kept
    fit = run("acceptance", "fit", str(trace), "-o", str(tmp_path / "fit.toml"), "--bootstrap", "10", "--json")
    assert fit.exit_code == 0, fit.stderr
    had_child = sum(sum(1 for n in r["accepted"] if any(
        p == n and r["ranks"][c] == 0 for c, p in enumerate(r["parents"]))) for r in rounds)
    took_rank0 = sum(sum(1 for n in r["accepted"][1:] if r["ranks"][n] == 0) for r in rounds)
    assert json.loads(fit.stdout)["rank_probs"][0] == pytest.approx(took_rank0 / had_child)


def test_trace_needs_speculative_mode(run, tmp_path):
    write_checkpoint(tmp_path / "target", TARGET, seed=1)
    result = run("reference", "generate", "--target", str(tmp_path / "target"), "--prompt-ids", "1", "--mode", "ar",
                 "--trace", str(tmp_path / "t.jsonl"))
    assert result.exit_code == 2 and "--trace" in result.stderr and not (tmp_path / "t.jsonl").exists()


def test_text_prompts_go_through_the_folders_tokenizer(run, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    write_checkpoint(tmp_path / "target", TARGET, seed=1)
    words = ["[UNK]"] + [f"w{i}" for i in range(1, 24)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "target" / "tokenizer.json"))
    by_text = json.loads(run("reference", "generate", "--target", str(tmp_path / "target"), "--prompt", "w1 w2 w3",
                             "--max-new-tokens", "6", "--mode", "ar", "--json").stdout)
    by_ids = json.loads(run("reference", "generate", "--target", str(tmp_path / "target"), "--prompt-ids", "1,2,3",
                            "--max-new-tokens", "6", "--mode", "ar", "--json").stdout)
    assert by_text["tokens"] == by_ids["tokens"]
    assert by_text["text"] == " ".join(words[t] for t in by_text["tokens"])  # WordLevel decodes with spaces
    (tmp_path / "target" / "tokenizer.json").write_text("{not json")
    bad = run("reference", "generate", "--target", str(tmp_path / "target"), "--prompt", "w1", "--mode", "ar")
    assert bad.exit_code == 2 and "tokenizer.json" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("change, message", [
    ({"rope_parameters": {"rope_type": "su", "rope_theta": 10000.0}},
     "field 'config.rope_parameters.rope_type' = 'su': allowed: default, linear, dynamic, llama3, yarn, longrope"),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": "fast"}},
     "field 'config.rope_scaling.beta_fast' = 'fast': must be a number > 0"),
    ({"rope_theta": 0}, "field 'config.rope_theta' = 0: must be a number > 0"),
    ({"num_local_experts": 8}, "field 'config.num_local_experts' = 8: experts in a llama config: mixture-of-experts "
     "families are mixtral, qwen3_moe, deepseek_v3, gpt_oss (set model_type)"),
])
def test_checkpoints_with_unknown_rope_or_experts_are_refused_in_one_line(run, tmp_path, change, message):
    write_checkpoint(tmp_path / "bad", TARGET, seed=1)
    path = tmp_path / "bad" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(CatalogError, match=re.escape(f"{path}: {message}")):
        read_checkpoint(tmp_path / "bad")
    result = run("reference", "generate", "--target", str(tmp_path / "bad"), "--prompt-ids", "1", "--mode", "ar")
    field, allowed = message.split("'")[1], message.rsplit(": ", 1)[-1]  # the CLI may shorten long values
    assert result.exit_code == 2 and f"'{field}'" in result.stderr and allowed in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("model", ["mixtral-8x7b", "deepseek-v3", "gpt-oss-20b"])
def test_mixture_of_experts_checkpoints_are_refused_by_name_not_by_a_missing_tensor(tmp_path, catalog, model):
    folder = tmp_path / model
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(catalog.model_entry(model).config))
    with pytest.raises(CatalogError, match=r"config\.json: .* \(mixture of experts\) is priced by the cost model but not "
                                           r"run by the reference engine"):
        read_checkpoint(folder)
