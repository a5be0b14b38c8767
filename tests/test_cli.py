"""The command line through click's CliRunner: JSON contracts, tables, one-line errors."""

import json

import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli


@pytest.fixture
def run():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return invoke


COMMANDS = [[], ["hw"], ["hw", "list"], ["hw", "show"], ["models"], ["models", "list"], ["models", "show"], ["models", "heads"], ["models", "lookups"], ["drafters"],
            ["models", "import"], ["cost"], ["tree"], ["tree", "expected"], ["tree", "optimize"], ["tree", "show"],
            ["tree", "dynamic"], ["acceptance"], ["acceptance", "list"], ["acceptance", "show"], ["acceptance", "fit"], ["acceptance", "from-tau"],
            ["acceptance", "verify"], ["estimate"], ["compare"], ["sensitivity"], ["search"], ["serve-sim"], ["sweep"], ["pareto"],
            ["export"], ["reference"], ["reference", "generate"], ["reference", "bench"], ["calibrate"], ["validate"],
            ["engines"], ["engines", "list"], ["engines", "show"], ["engines", "fit"], ["engines", "adopt"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_for_every_command(run, command):
    result = run(*command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.stdout


def test_every_registered_command_is_covered_by_the_help_test():
    def walk(group, prefix):
        for name, command in group.commands.items():
            yield prefix + [name]
            if hasattr(command, "commands"):
                yield from walk(command, prefix + [name])
    assert sorted(walk(cli, [])) == sorted(c for c in COMMANDS if c)


def test_hw_list_json_is_one_list_with_units_in_keys(run):
    result = run("hw", "list", "--kind", "fpga", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert {r["kind"] for r in rows} == {"fpga"} and "v80" in {r["name"] for r in rows}
    v80 = next(r for r in rows if r["name"] == "v80")
    assert v80["spec"]["memory"][0]["bandwidth_bytes_per_s"] == pytest.approx(819.2e9)
    assert v80["sources"]["clock"]["tag"] == "paper"


def test_hw_list_table_names_every_kind(run):
    result = run("hw", "list")
    assert result.exit_code == 0
    assert all(f" {kind} " in result.stdout for kind in ("fpga", "gpu", "cpu", "link"))


def test_hw_show_prints_sources(run):
    text = run("hw", "show", "pcie-gen4-x16-host-staged")
    assert text.exit_code == 0 and "latency" in text.stdout and "measured" in text.stdout
    obj = json.loads(run("hw", "show", "rtx-4090", "--json").stdout)
    assert obj["spec"]["decode_power_w"] == 236
    assert obj["sources"]["decode_power"]["source"].startswith("DFVG")


def test_models_list_and_show(run):
    rows = json.loads(run("models", "list", "--json").stdout)
    llama = next(r for r in rows if r["name"] == "llama-2-7b")
    assert llama["params"] == 6_738_415_616 and llama["published_params"]["value"] == 6.74e9
    shown = run("models", "show", "qwen3-8b")
    assert shown.exit_code == 0 and "8,190,735,360" in shown.stdout


def test_cost_json_single_point(run):
    result = run("cost", "--model", "llama-2-7b", "--device", "a100-80gb", "--json", "--engine", "roofline")
    assert result.exit_code == 0
    obj = json.loads(result.stdout)
    assert obj["bound"] == "memory" and obj["memory_fit"]["fits"] is True
    assert obj["time_s"] == pytest.approx(obj["memory_time_s"] + obj["overhead_time_s"])
    fitted = json.loads(run("cost", "--model", "llama-2-7b", "--device", "a100-80gb", "--json").stdout)
    # an engine's smooth roofline lies between the max and the sum of its terms (p >= 1)
    parts = (fitted["compute_time_s"], fitted["memory_time_s"])
    assert max(parts) + fitted["overhead_time_s"] <= fitted["time_s"] * (1 + 1e-12)
    assert fitted["time_s"] <= sum(parts) * (1 + 1e-12) + fitted["overhead_time_s"]
    for key in ("time_s", "flops", "bytes", "achieved_bandwidth_bytes_per_s", "tokens_per_s"):
        assert obj[key] > 0


def test_cost_json_list_for_several_points_and_fpga_fields(run):
    result = run("cost", "--model", "llama-160m", "--device", "v80", "--tokens", "1-64:x2", "--context", "0,512",
                 "--json")
    rows = json.loads(result.stdout)
    assert len(rows) == 14 and {r["passes"] for r in rows} == {1, 2}
    assert [r["tokens"] for r in rows[::2]] == [1, 2, 4, 8, 16, 32, 64]


def test_cost_table_shows_knee_and_bounds(run):
    result = run("cost", "--model", "llama-2-7b", "--device", "rtx-4090", "--tokens", "1,512")
    assert result.exit_code == 0
    assert "knee" in result.stdout and "memory" in result.stdout and "compute" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["cost", "--model", "llama-2-7b", "--device", "rtx4090"], "unknown device 'rtx4090'; did you mean rtx-4090"),
    (["cost", "--model", "lama-2-7b", "--device", "v80"], "unknown model 'lama-2-7b'; did you mean llama-2-7b"),
    (["cost", "--model", "llama-2-7b", "--device", "v80", "--tokens", "0"], "--tokens '0': every value must be >= 1"),
    (["cost", "--model", "llama-2-7b", "--device", "v80", "--batch", "two"], "--batch 'two': expected integers"),
    (["hw", "show", "pcie-gen9"], "unknown hardware entry 'pcie-gen9'"),
    (["--hwdb-dir", "/nonexistent", "hw", "list"], "--hwdb-dir /nonexistent: no such directory"),
])
def test_bad_input_is_one_line_and_exit_2(run, args, message):
    result = run(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and result.stdout == ""


def test_bad_data_file_through_the_cli(run, models_copy):
    path = models_copy / "opt-13b.toml"
    path.write_text(path.read_text().replace("num_attention_heads = 40", "num_attention_heads = 0"))
    result = run("--models-dir", str(models_copy), "cost", "--model", "opt-13b", "--device", "a100-80gb")
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"Error: {path}: field 'config.num_attention_heads' = 0: "
                                     "must be a positive integer")


QWEN3_TINY = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256,
              "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 128, "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": True,
              "rope_scaling": None, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0}


def test_models_import_round_trip(run, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN3_TINY))
    out = tmp_path / "mine"
    result = run("models", "import", str(config), "--name", "my-qwen3", "--out-dir", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["path"] == str(out / "my-qwen3.toml")
    shown = json.loads(run("--models-dir", str(out), "models", "show", "my-qwen3", "--json").stdout)
    assert shown["spec"]["qk_norm"] is True and shown["spec"]["head_dim"] == 128 and shown["spec"]["tied_embeddings"]
    # an existing file is never replaced silently
    again = run("models", "import", str(config), "--name", "my-qwen3", "--out-dir", str(out))
    assert again.exit_code == 2 and "already exists; pass --force" in again.stderr
    assert run("models", "import", str(config), "--name", "my-qwen3", "--out-dir", str(out), "--force").exit_code == 0


def test_models_dir_from_environment(run, tmp_path, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**QWEN3_TINY, "model_type": "mistral"}))
    monkeypatch.setenv("DFVG_DSE_MODELS_DIR", str(tmp_path))
    assert run("models", "import", str(config), "--name", "m").exit_code == 0
    names = [r["name"] for r in json.loads(run("models", "list", "--json").stdout)]
    assert "m" in names and "llama-2-7b" in names  # user entries add to the shipped ones


@pytest.mark.parametrize("args", [["cost", "--model", "llama-2-7b", "--token", "3"], ["hw", "list", "--kind", "FPGA"],
                                  ["cost", "--model", "llama-2-7b"], ["nosuchcommand"]])
def test_usage_errors_are_one_line(run, args):
    result = run(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "--help" in lines[0]


def test_hw_show_lists_memory_tiers_and_model_inputs(run):
    shown = run("hw", "show", "v80").stdout
    assert "memory[0].bandwidth" in shown and "memory[1].capacity" in shown
    assert "8192 PE DSPs x 2 x 2 products x 300 MHz = 9.83 TFLOP/s" in shown
    assert "hbm 32 GB @ 819.2 GB/s" in run("hw", "list", "--kind", "fpga").stdout


def test_cost_warns_past_the_model_context(run):
    result = run("cost", "--model", "llama-2-7b", "--device", "a100-80gb", "--context", "8192")
    assert result.exit_code == 0 and "exceeds llama-2-7b's max_position_embeddings 4096" in result.stderr
    obj = json.loads(run("cost", "--model", "llama-2-7b", "--device", "a100-80gb", "--context", "8192",
                         "--json").stdout)
    assert obj["warnings"] and obj["passes"] == 1 and obj["weights_on_chip"] is False


def test_non_embedding_count_follows_the_model_card(run):
    # Qwen3 model cards: Qwen3-8B 6.95B non-embedding, Qwen3-0.6B 0.44B (embedding and LM head excluded).
    rows = {r["name"]: r for r in json.loads(run("models", "list", "--json").stdout)}
    assert rows["qwen3-8b"]["params_non_embedding"] == pytest.approx(6.95e9, rel=0.005)
    assert rows["qwen3-0.6b"]["params_non_embedding"] == pytest.approx(0.44e9, rel=0.005)


@pytest.mark.parametrize("args, message", [
    (["--tokens", "99999999999999999999999"], "values must be <= 1e+09"),
    (["--tokens", "1-99999", "--context", "0-99"], "at most 100,000 per call"),
    (["--tokens", "1-1000000000"], "more than 100,000 values"),
])
def test_cost_rejects_oversized_requests(run, args, message):
    result = run("cost", "--model", "llama-2-7b", "--device", "a100-80gb", *args)
    assert result.exit_code == 2 and message in result.stderr


@pytest.mark.parametrize("config_file, family, flags", [
    ("config_llama_tiny.json", "llama", {"qkv_bias": True, "o_bias": True, "n_kv_heads": 2}),
    ("config_qwen2_tiny.json", "qwen2", {"qkv_bias": True, "o_bias": False, "tied_embeddings": True}),
    ("config_opt_tiny.json", "opt", {"final_norm": False, "d_embed": 64, "gated_ffn": False}),
])
def test_models_import_each_family(run, tmp_path, config_file, family, flags):
    from pathlib import Path
    config = Path(__file__).parent / "catalog" / config_file
    result = run("models", "import", str(config), "--name", "t", "--out-dir", str(tmp_path), "--json")
    assert result.exit_code == 0, result.stderr
    shown = json.loads(run("--models-dir", str(tmp_path), "models", "show", "t", "--json").stdout)
    assert shown["family"] == family
    assert {k: shown["spec"][k] for k in flags} == flags
