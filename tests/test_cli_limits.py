"""Every accepted input finishes in bounded time and memory; odd literals are one short line, exit 2
(issue 12, items 5, 8 and 9). Limits are tested at limit + 1, on small inputs."""

import json

import pytest

from dfvg_dse import sim
from dfvg_dse.acceptance import dynamic
from dfvg_dse.tree import optimal

from cli_checks import one_line_error

LONG_VECTOR = ",".join(["0.512345678"] + ["0.0123456789"] * 31)  # 414 characters
LONG_PARENTS = "parents:" + ",".join(["-1"] + [str(i // 2) for i in range(127)])
ESTIMATE = ["estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "v80",
            "--verify-device", "rtx-4090"]


def one_short_line(result) -> str:
    return one_line_error(result, max_chars=200)


def test_inline_specs_longer_than_a_file_name_work(run):
    result = run("tree", "optimize", "--acceptance", LONG_VECTOR, "--budget", "15", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["budget"] == 15
    result = run("tree", "expected", "--acceptance", "0.8", "--tree", LONG_PARENTS, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["nodes"] == 128


@pytest.mark.parametrize("args, message", [
    (["tree", "expected", "--acceptance", "0.8", "--tree", "nosuch/file.json"], "tree: no such file: 'nosuch/file.json'"),
    (["tree", "show", "--tree", "nosuch.toml"], "tree: no such file: 'nosuch.toml'"),
    (["tree", "expected", "--acceptance", "nosuch/p.toml", "--tree", "chain:2"], "acceptance: no such file"),
    (["tree", "expected", "--acceptance", "0.8", "--tree", "chain:100000"], "100,000 draft tokens; at most 4096"),
    (["tree", "expected", "--acceptance", "0.8", "--tree", "chain:1000000000"], "draft tokens; at most 4096"),
    (["tree", "show", "--tree", "chain:2000"], "depth 2,000; at most 1024 levels"),
    (["tree", "show", "--tree", "published:" + "x" * 300], "unknown published tree 'xxxx"),
    (["tree", "show", "--tree", "9999999999999999999999"], "expected chain:G"),
    (["tree", "show", "--tree", "chain:3", "--acceptance", "a" * 300], "acceptance 'aaaa"),
    (["tree", "expected", "--acceptance", "1e999", "--tree", "chain:2"], "acceptance '1e999': value 1 = inf"),
    (["acceptance", "show", "a" * 300], "acceptance 'aaaa"),
    (["search", "--study", "s" * 300 + ".toml"], "study: no such file: '..."),
    (["tree", "dynamic", "--acceptance", "0.8", "--seed", "-1", "--rounds", "100"], "seed = -1"),
    # one past the DP's limit (2e9 steps): refused before any work, naming what fits
    (["tree", "optimize", "--acceptance", "pair:sequoia-demo", "--budget", "1024", "--max-depth", "120"],
     "at depth 120"),
    (["tree", "optimize", "--acceptance", "pair:sequoia-demo", "--budget", "4096", "--max-depth", "200"],
     "depth <= 7 at budget 4096 or budget <= "),
])
def test_odd_inputs_are_one_short_line(run, args, message):
    assert message in one_short_line(run(*args))


def test_the_monte_carlo_refuses_past_its_work_limit(run, monkeypatch):
    monkeypatch.setattr(dynamic, "MAX_MC_WORK", 1e5)
    line = one_short_line(run("tree", "dynamic", "--acceptance", "pair:qwen3-8b/qwen3-0.6b", "--rounds", "1000"))
    assert "past the 1e+05 limit" in line and "use at most 126 rounds" in line
    assert run("tree", "dynamic", "--acceptance", "pair:qwen3-8b/qwen3-0.6b", "--rounds", "126").exit_code == 0


def test_the_simulator_refuses_past_its_work_limit(run, monkeypatch):
    monkeypatch.setattr(sim, "MAX_SIM_WORK", 5e5)  # 1000 rounds x batch 100 x 5 levels
    args = ESTIMATE + ["--tree", "chain:4", "--batch", "100", "--simulate"]
    line = one_short_line(run(*args, "--rounds", "1001"))
    assert "1,001 rounds x batch 100" in line and "use at most 1,000 rounds" in line
    assert run(*args, "--rounds", "1000").exit_code == 0


def test_the_dp_limit_is_what_the_messages_say(monkeypatch, run):
    monkeypatch.setattr(optimal, "MAX_DP_STEPS", optimal.dp_steps(40, 6, 32))
    assert run("tree", "optimize", "--acceptance", "pair:sequoia-demo", "--budget", "40", "--max-depth", "6",
               "--json").exit_code == 0
    line = one_short_line(run("tree", "optimize", "--acceptance", "pair:sequoia-demo", "--budget", "40",
                              "--max-depth", "7"))
    assert "depth <= 6 at budget 40" in line
