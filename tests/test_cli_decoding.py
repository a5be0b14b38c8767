"""tree and acceptance commands through CliRunner."""

import json

import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


def test_tree_expected_json_contract(run):
    result = run("tree", "expected", "--acceptance", "0.8", "--tree", "chain:4", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"expected_tokens": pytest.approx(3.3616), "nodes": 5, "depth": 4,
                                         "budget": 4, "level_widths": [1, 1, 1, 1], "warnings": []}


def test_tree_expected_on_published_and_vllm_trees(run):
    out = json.loads(run("tree", "expected", "--acceptance", "pair:sequoia-demo", "--tree",
                         "published:medusa-mc-sim-7b-63", "--json").stdout)
    assert out["expected_tokens"] == pytest.approx(3.3548, abs=5e-5) and out["nodes"] == 64
    vllm = json.loads(run("tree", "expected", "--acceptance", "0.63,0.11,0.06", "--tree", "vllm:[(0,), (1,), (0, 0)]",
                          "--json").stdout)
    assert vllm["expected_tokens"] == pytest.approx(1 + 0.63 + 0.11 + 0.63 * 0.63)


def test_tree_from_a_file(run, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"parents": [-1, 0, 0, 1]}))
    out = json.loads(run("tree", "expected", "--acceptance", "0.5,0.25", "--tree", str(path), "--json").stdout)
    assert out["expected_tokens"] == pytest.approx(1 + 0.5 + 0.25 + 0.25)


def test_tree_optimize_json_contract(run):
    out = json.loads(run("tree", "optimize", "--acceptance", "pair:sequoia-demo", "--budget", "15", "--max-depth", "9",
                         "--json").stdout)
    assert out["expected_tokens"] == pytest.approx(3.1303, abs=5e-5)  # T6: n = 16 nodes, 10 levels
    assert out["nodes"] == 16 and len(out["parents"]) == 16 and len(out["choices"]) == 15
    assert out["vllm_speculative_token_tree"].count("(") == 15  # num_speculative_tokens = 15
    capped = json.loads(run("tree", "optimize", "--acceptance", "pair:qwen3-8b/qwen3-0.6b", "--budget", "32",
                            "--max-width", "4", "--json").stdout)
    assert max(capped["level_widths"]) <= 4 and capped["method"] == "greedy-capped"


def test_tree_show_draws_every_node(run):
    result = run("tree", "show", "--tree", "kary:2x2", "--acceptance", "0.6,0.3")
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 7 and lines[1].startswith("├─ r0  p=0.600") and "f=0.180" in result.stdout


def test_tree_dynamic_json(run):
    out = json.loads(run("tree", "dynamic", "--acceptance", "pair:qwen3-8b/qwen3-0.6b", "--k-max", "4", "--budget",
                         "12", "--min-depth", "3", "--rounds", "2000", "--json").stdout)
    assert out["rule"] == "adapt" and out["method"] == "monte-carlo" and out["expected_nodes"] <= 12
    for rule in ("eagle2", "duodecoding"):
        other = json.loads(run("tree", "dynamic", "--acceptance", "pair:sequoia-demo", "--rule", rule, "--json").stdout)
        assert other["method"] == "exact" and other["expected_tokens"] > 1


def test_acceptance_list_and_show(run):
    rows = json.loads(run("acceptance", "list", "--json").stdout)
    names = {r["name"] for r in rows}
    assert {"qwen3-8b/qwen3-0.6b", "vicuna-7b/vicuna-160m", "llama-2-7b/llama-160m", "opt-13b/opt-125m",
            "sequoia-demo", "sequoia/llama3-70b-instruct/llama3-8b-instruct/cnn"} <= names
    assert sum(n.startswith("leviathan/") for n in names) == 12
    shown = json.loads(run("acceptance", "show", "qwen3-8b/qwen3-0.6b", "--json").stdout)
    assert shown["rank_probs"][0] == 0.8 and shown["confidence"]["implied_rank_probs"][0] == pytest.approx(0.8, abs=1e-3)


@pytest.mark.parametrize("args, message", [
    (["tree", "expected", "--acceptance", "fast", "--tree", "chain:2"], "acceptance 'fast': expected a number"),
    (["tree", "expected", "--acceptance", "1.5", "--tree", "chain:2"], "must be a probability in [0, 1]"),
    (["tree", "expected", "--acceptance", "0.6,0.6", "--tree", "chain:2"], "the sum must be <= 1"),
    (["tree", "expected", "--acceptance", "pair:nope", "--tree", "chain:2"], "unknown acceptance profile 'nope'"),
    (["tree", "expected", "--acceptance", "0.5", "--tree", "published:nope"], "unknown published tree 'nope'"),
    (["tree", "expected", "--acceptance", "0.5", "--tree", "star:3"], "expected chain:G"),
    (["tree", "optimize", "--acceptance", "0.5", "--budget", "0"], "Invalid value for '--budget'"),
    (["acceptance", "show", "nope"], "expected a number"),
])
def test_errors_are_one_line(run, args, message):
    result = run(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_bad_profile_file_names_file_and_field(run, tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('name = "x"\nsource = "s"\ntag = "measured"\n[rank]\nprobs = [0.5, "a"]\n')
    result = run("tree", "expected", "--acceptance", str(path), "--tree", "chain:2")
    assert result.exit_code == 2 and f"{path}: field 'rank.probs[1]' = 'a': must be a finite number" in result.stderr


def test_acceptance_verify_reproduces_t5(run):
    out = json.loads(run("acceptance", "verify", "--target-probs", "0.4,0.3,0.2,0.1", "--draft-probs",
                         "0.1,0.2,0.3,0.4", "--candidates", "4", "--json").stdout)
    assert out["single_token_acceptance"] == pytest.approx(0.6)
    assert out["rules"]["specinfer"]["total"] == pytest.approx(0.7912)
    assert out["rules"]["sequoia"]["p_k"] == pytest.approx([0.6, 0.164286, 0.076012, 0.159702], abs=5e-7)
    assert out["rules"]["sequoia"]["output_max_error"] < 1e-12
    bad = run("acceptance", "verify", "--target-probs", "0.5,0.6", "--draft-probs", "0.5,0.5")
    assert bad.exit_code == 2 and "summing to 1" in bad.stderr
