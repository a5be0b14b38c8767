"""Parallel verifiers from the command line (issue 17): degrees as options or group names in cost,
estimate, compare and sensitivity; refusals in one line; exports that carry the sizes."""

from __future__ import annotations

import json

import pytest

from tests.cli_checks import one_line_error


def test_cost_takes_degrees_or_a_group_name(run):
    by_options = run("cost", "--model", "qwen3-30b-a3b", "--device", "h100-sxm", "--tp", "4", "--ep", "4", "--json")
    by_name = run("cost", "--model", "qwen3-30b-a3b", "--device", "4xh100-sxm-ep4", "--json")
    assert by_options.exit_code == 0 and by_options.stdout == by_name.stdout
    tp = json.loads(run("cost", "--model", "qwen3-30b-a3b", "--device", "4xh100-sxm", "--json").stdout)
    ep = json.loads(by_name.stdout)
    assert ep != tp and json.loads(run("cost", "--model", "qwen3-30b-a3b", "--device", "h100-sxm", "--ep", "4",
                                       "--json").stdout) == ep  # an expert degree alone implies TP 4


@pytest.mark.parametrize("args,needles", [
    (["cost", "--model", "qwen3-30b-a3b", "--device", "h100-sxm", "--tp", "4", "--ep", "2"],
     ("4xh100-sxm-ep2", "tensor-parallel degree (4)")),
    (["cost", "--model", "qwen3-30b-a3b", "--device", "v80", "--ep", "2"], ("2xv80-ep2", "an expert degree does not apply")),
    (["cost", "--model", "qwen3-8b", "--device", "xeon-8480plus", "--tp", "2"], ("a CPU stage is one device",)),
    (["estimate", "--target", "mixtral-8x7b", "--draft", "qwen3-0.6b", "--verify-device", "h100-sxm",
      "--verify-tp", "2", "--verify-ep", "4", "--acceptance", "0.7"], ("tensor-parallel degree (2)",))])
def test_bad_parallel_degrees_are_one_line(run, args, needles):
    result = run(*args)
    assert result.exit_code == 2
    one_line_error(result, *needles)


def test_a_dense_model_on_an_expert_parallel_group_is_tensor_parallel_with_a_warning(run):
    ep = run("cost", "--model", "llama-3.1-8b", "--device", "4xh100-sxm-ep4", "--json")
    tp = run("cost", "--model", "llama-3.1-8b", "--device", "4xh100-sxm", "--json")
    ep, tp = json.loads(ep.stdout), json.loads(tp.stdout)
    assert any("is dense, so expert parallelism does not apply" in w for w in ep["warnings"])
    assert ep["time_s"] == tp["time_s"] and ep["bytes"] == tp["bytes"]


def test_estimate_compare_and_sensitivity_take_the_expert_degree(run):
    est = run("estimate", "--target", "qwen3-30b-a3b", "--draft", "qwen3-0.6b", "--verify-device", "h100-sxm",
              "--verify-ep", "4", "--acceptance", "0.7", "--json")
    assert est.exit_code == 0, est.output
    assert "4xh100-sxm-ep4" in est.stdout
    cmp = run("compare", "--target", "qwen3-30b-a3b", "--draft", "qwen3-0.6b", "--gpu", "h100-sxm", "--verify-tp", "4",
              "--verify-ep", "4", "--acceptance", "0.7", "--json")
    assert cmp.exit_code == 0, cmp.output
    assert "4xh100-sxm-ep4" in cmp.stdout


def test_exports_carry_the_expert_degree(run, tmp_path):
    result = run("search", "--target", "qwen3-30b-a3b", "--draft", "qwen3-0.6b", "--acceptance", "0.7",
                 "--verify-device", "4xh100-sxm-ep4", "--results-dir", str(tmp_path), "--run-id", "ep")
    assert result.exit_code == 0, result.output
    exports = {fmt: json.loads(run("export", str(tmp_path / "ep"), "--pick", "max-throughput", "--format", fmt,
                                   "--json").stdout) for fmt in ("vllm", "sglang", "trtllm")}
    vllm, sglang, trtllm = exports["vllm"], exports["sglang"], exports["trtllm"]
    assert vllm["llm_kwargs"]["enable_expert_parallel"] is True and vllm["llm_kwargs"]["tensor_parallel_size"] == 4
    assert "--enable-expert-parallel" in vllm["command"]
    assert sglang["server_args"]["ep_size"] == 4 and "--ep-size 4" in sglang["command"]
    assert trtllm["llm_kwargs"]["moe_expert_parallel_size"] == 4 and "--ep_size 4" in trtllm["command"]
    assert vllm["searched"]["verify_device"] == "4xh100-sxm-ep4"


def test_the_draft_at_its_own_tensor_degree_on_the_verify_gpus(run):
    base = ["estimate", "--target", "llama-3.1-70b", "--draft", "llama-3.2-1b", "--verify-device", "4xh100-sxm",
            "--acceptance", "0.8", "--tree", "chain:4", "--json"]
    stage = {}
    for tp in ("1", "2", "4"):
        result = run(*base, "--draft-tp", tp)
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert out["stages"]["draft"]["device"] == "4xh100-sxm"  # the same GPUs: one stage waits for the other
        stage[tp] = out["stages"]["draft"]["time_s"]
    default = json.loads(run(*base).stdout)["stages"]["draft"]["time_s"]
    assert default == stage["4"] and len(set(stage.values())) == 3
    too_many = run(*base, "--draft-tp", "8")
    assert too_many.exit_code == 2
    one_line_error(too_many, "--draft-tp 8", "at most 4 of its h100-sxm")


def test_two_fpgas_draft_side_by_side_from_the_command_line(run, tmp_path):
    est = run("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "v80", "--draft-tp", "2",
              "--verify-device", "rtx-4090", "--acceptance", "0.8", "--tree", "kary:8x2", "--json")
    assert est.exit_code == 0, est.output
    assert json.loads(est.stdout)["stages"]["draft"]["device"] == "2xv80"
    result = run("search", "--draft-device", "2xv80", "--draft-device", "v80", "--results-dir", str(tmp_path),
                 "--run-id", "f", "--json")
    assert result.exit_code == 0, result.output
    refused = run("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "4xv80-pp2",
                  "--verify-device", "rtx-4090", "--acceptance", "0.8")
    assert refused.exit_code == 2
    one_line_error(refused, "splitting the layers over FPGAs (a pipeline degree) is not modelled")


def test_a_group_with_degrees_given_again_is_refused_everywhere(run):
    for args in (["estimate", "--target", "llama-3.1-70b", "--draft", "llama-3.2-1b", "--verify-device", "4xh100-sxm",
                  "--draft-device", "4xh100-sxm", "--draft-tp", "1", "--acceptance", "0.8"],
                 ["compare", "--target", "qwen3-30b-a3b", "--draft", "qwen3-0.6b", "--gpu", "4xh100-sxm",
                  "--verify-ep", "4", "--acceptance", "0.7"],
                 ["sensitivity", "--vary", "batch", "--gpu", "4xh200", "--verify-ep", "4"]):
        result = run(*args)
        assert result.exit_code == 2, args
        one_line_error(result, "is already a group", "with the degrees")


def test_a_narrow_checkpoint_keeps_its_dtype_in_a_search_and_its_exports_load_it_as_is(run, tmp_path):
    result = run("search", "--target", "deepseek-v3", "--draft", "qwen3-0.6b", "--acceptance", "0.7",
                 "--verify-device", "8xh200", "--draft-device", "v80", "--results-dir", str(tmp_path), "--run-id", "ds")
    assert result.exit_code == 0, result.output  # FP8 as stored: 85 GB per H200, where float16 would not fit
    vllm = json.loads(run("export", str(tmp_path / "ds"), "--pick", "knee", "--format", "vllm", "--json").stdout)
    assert vllm["llm_kwargs"]["dtype"] == "auto" and "--dtype auto" in vllm["command"]
    assert "enable_expert_parallel" not in vllm["llm_kwargs"]
    hf = json.loads(run("export", str(tmp_path / "ds"), "--pick", "knee", "--format", "hf", "--json").stdout)
    assert 'from_pretrained(TARGET, dtype="auto", device_map="auto")' in hf["python"]


def test_a_dense_target_on_an_expert_parallel_group_exports_no_expert_flags(run, tmp_path):
    result = run("search", "--target", "llama-3.1-70b", "--draft", "llama-3.2-1b", "--acceptance", "0.8",
                 "--verify-device", "4xh100-sxm-ep4", "--draft-device", "4xh100-sxm-ep4", "--results-dir", str(tmp_path),
                 "--run-id", "d")
    assert result.exit_code == 0, result.output
    vllm = json.loads(run("export", str(tmp_path / "d"), "--pick", "knee", "--format", "vllm", "--json").stdout)
    trt = json.loads(run("export", str(tmp_path / "d"), "--pick", "knee", "--format", "trtllm", "--json").stdout)
    assert "enable_expert_parallel" not in vllm["llm_kwargs"] and "--ep_size" not in trt["command"]
    assert vllm["llm_kwargs"]["tensor_parallel_size"] == 4


def test_a_draft_with_another_vocabulary_is_a_warning_and_mla_models_name_their_gap(run):
    out = json.loads(run("estimate", "--target", "deepseek-v3", "--draft", "qwen3-0.6b", "--verify-device", "8xh200",
                         "--acceptance", "0.7", "--tree", "chain:3", "--json").stdout)
    assert any("different vocabularies (151,936 and 129,280 rows)" in w for w in out["warnings"])
    assert any("30.3 tokens/s, is several times slower" in w for w in out["warnings"])
    # the claim holds: SGLang v0.4.1.post2's release note (sgl-project/sglang PR #2643) measured 30.29
    # tokens/s at batch 1 on 8 H200s (128 in, 256 out); the model prices a decode step over twice as fast
    priced = json.loads(run("cost", "--model", "deepseek-v3", "--device", "8xh200", "--tokens", "1", "--context", "256",
                            "--json").stdout)
    assert priced["tokens_per_s"] > 2 * 30.29
    same = json.loads(run("estimate", "--target", "qwen2.5-72b", "--draft", "qwen2.5-0.5b", "--verify-device",
                          "4xh100-sxm", "--draft-tp", "1", "--acceptance", "0.7", "--tree", "chain:3", "--json").stdout)
    assert not any("vocabularies" in w for w in same["warnings"])  # 152,064 and 151,936 rows: one vocabulary, padded


def test_sensitivity_asks_about_any_target_fpga_and_acceptance(run):
    out = json.loads(run("sensitivity", "--vary", "target", "--gpu", "8xh200", "--values", "deepseek-v3,qwen3-235b-a22b",
                         "--acceptance", "0.7", "--rounds", "200", "--json").stdout)
    assert out["infeasible"] == {}  # DeepSeek-V3 keeps its FP8 weights (85 GB per H200), not the preset's float16
    assert all(v is not None for v in out["speedup"]["dfvg"])
    two = run("sensitivity", "--vary", "batch", "--pair", "qwen3-30b-a3b/qwen3-0.6b", "--gpu", "h100-sxm", "--fpga",
              "2xv80", "--acceptance", "0.8", "--values", "1,4", "--rounds", "200", "--json")
    assert two.exit_code == 0, two.output
    both = run("sensitivity", "--vary", "acceptance", "--acceptance", "0.8")
    assert both.exit_code == 2
    one_line_error(both, "--vary acceptance sweeps the acceptance itself")
