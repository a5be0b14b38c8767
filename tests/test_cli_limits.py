"""Every accepted input finishes in bounded time and memory; odd literals are one short line, exit 2
(issue 12, items 5, 8 and 9). Limits are tested at limit + 1, on small inputs."""

import dataclasses
import json
import math
import tracemalloc

import numpy as np
import pytest

from dfvg_dse import sim
from dfvg_dse.acceptance import calibrate, check_round, dynamic, fit_profile
from dfvg_dse.cli._base import MAX_WARNINGS_SHOWN
from dfvg_dse.pipeline import estimate
from dfvg_dse.specs import AcceptanceProfile, DecodeConfig, DuoRule, Eagle2Rule, InputError, SystemSpec
from dfvg_dse.tree import optimal, parse_tree_spec

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
    (["tree", "dynamic", "--acceptance", "0.8", "--seed", "-1", "--rounds", "100"], "'--seed': -1 is not in the range"),
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


# Issue 13, item 12: every size option has a cap in its --help and a constant beside the code it protects,
# refused with one line naming the option before any work.
@pytest.mark.parametrize("args, needles", [
    (ESTIMATE + ["--dynamic", "duodecoding", "--gamma", "1000000000"], ["'--gamma'", "1<=x<=64"]),
    (["tree", "dynamic", "--acceptance", "0.8", "--rule", "duodecoding", "--gamma", "65"], ["'--gamma'", "1<=x<=64"]),
    (ESTIMATE + ["--dynamic", "eagle2", "--top-k", "100000"], ["'--top-k'", "1<=x<=64"]),
    (ESTIMATE + ["--dynamic", "eagle2", "--total-tokens", "100000"], ["'--total-tokens'", "2<=x<=4096"]),
    (["acceptance", "fit", "nosuch.jsonl", "-o", "out.toml", "--bootstrap", "100000"],
     ["'--bootstrap'", "0<=x<=10000"]),
    (ESTIMATE + ["--sync-us", "2e6"], ["'--sync-us'", "0<=x<=1000000"]),
])
def test_size_options_have_caps(run, args, needles):
    one_line_error(run(*args), *needles, max_chars=200)


def test_the_caps_are_in_the_help(run):
    assert "1<=x<=64" in run("estimate", "--help").stdout.split("--gamma")[1].split("--")[0]
    assert "0<=x<=10000" in run("acceptance", "fit", "--help").stdout.split("--bootstrap")[1].split("--seed")[0]
    assert "100,000 points" in run("cost", "--help").stdout


def test_the_library_refuses_rules_past_their_caps():
    profile = AcceptanceProfile("alpha 0.8", (0.8,))
    with pytest.raises(InputError, match=f"gamma = 1,000,000,000: at most {dynamic.MAX_DUO_GAMMA}"):
        dynamic.round_work(profile, DuoRule(10**9))
    with pytest.raises(InputError, match=f"top_k = 100,000: at most {dynamic.MAX_EAGLE2_TOP_K}"):
        dynamic.simulate_eagle2(profile, Eagle2Rule(10**5, 6, 60), rounds=100)
    assert dynamic.simulate_duodecoding(profile, DuoRule(dynamic.MAX_DUO_GAMMA), rounds=100).expected_tokens > 1


@pytest.mark.parametrize("tree, message", [
    ("kary:99999x99999", "depth 99,999; at most 1024"),
    ("kary:9999x9999", "depth 9,999; at most 1024"),
    ("kary:99999x1024", "more than 10^12 draft tokens"),  # 99999^1025 is never computed (nor printed)
    ("kary:999999999999x7", "more than 10^12 draft tokens"),
    ("kary:100x3", "1,010,100 draft tokens"),  # counted in full, not only up to the limit
    ("kary:2x12", "8,190 draft tokens"),
    ("kary:1x2000", "depth 2,000"),
])
def test_a_kary_tree_is_sized_in_closed_form(run, tree, message):
    assert message in one_short_line(run("tree", "show", "--tree", tree))
    with pytest.raises(InputError, match=message.replace("^", r"\^")):
        parse_tree_spec(tree)
    assert parse_tree_spec("kary:4x5").n_nodes == (4**6 - 1) // 3  # the deepest 4-ary tree under the limit


def test_a_cost_grid_prints_a_bounded_number_of_warnings(run):
    result = run("cost", "--model", "qwen3-8b", "--device", "rtx-4090", "--tokens", "1-100000")
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == MAX_WARNINGS_SHOWN + 1 and "more like these" in warnings[-1]


def _chain_rounds(count: int) -> list:
    rng = np.random.default_rng(0)
    parents, ranks = list(range(-1, 4)), [0] * 5
    return [check_round({"parents": parents, "ranks": ranks, "accepted": list(range(int(k) + 1))}, i)
            for i, k in enumerate(rng.integers(0, 5, count), 1)]


def test_the_bootstrap_is_refused_past_its_work_limit(monkeypatch):
    rounds = _chain_rounds(50)
    monkeypatch.setattr(calibrate, "MAX_BOOTSTRAP_DRAWS", 1000)
    with pytest.raises(InputError, match="past the 1e\\+03 limit .*; use at most 20 resamples"):
        fit_profile(rounds, "t", "test", bootstrap=21)
    assert fit_profile(rounds, "t", "test", bootstrap=20).rounds == 50
    with pytest.raises(InputError, match="1..10,000"):
        fit_profile(rounds, "t", "test", bootstrap=calibrate.MAX_BOOTSTRAP + 1)


def test_the_bootstrap_holds_a_bounded_block_of_weights():
    """10,000 resamples of 2,000 rounds: the weights were one (10,000, 2,000) array (160 MB); drawn in
    blocks, the peak stays near BOOTSTRAP_CHUNK_CELLS (32 MB), and the intervals are the same numbers."""
    rounds = _chain_rounds(2000)
    tracemalloc.start()
    try:
        fit = fit_profile(rounds, "t", "test", bootstrap=10_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100e6, peak
    hits, exposed = (a.sum(axis=1) for a in calibrate.rank_counts(rounds, 16, 16))
    used = len(fit.ci_low)
    rng = np.random.default_rng(0)
    weights = rng.multinomial(2000, np.full(2000, 1 / 2000), size=500)  # the first 500 resamples, in one draw
    first = np.divide(weights @ hits[:, :used], weights @ exposed[:, :used])
    assert np.allclose(calibrate._bootstrap(hits[:, :used], exposed[:, :used], 500, 0), first)


def test_a_round_that_takes_forever_is_infeasible_not_zero_tokens(catalog):
    system = SystemSpec(catalog.device("v80"), catalog.device("rtx-4090"), catalog.link("pcie-gen4-x16-host-staged"))
    config = DecodeConfig(catalog.model("qwen3-8b"), system, catalog.model("qwen3-0.6b"),
                          catalog.pair_profile("qwen3-8b", "qwen3-0.6b"), tree=parse_tree_spec("chain:4"))
    for sync_s in (math.inf, math.nan):
        result = estimate(dataclasses.replace(config, sync_s=sync_s))
        assert not result.feasible and "not a finite rate" in result.reason and result.tokens_per_s is None
    assert estimate(config).feasible
