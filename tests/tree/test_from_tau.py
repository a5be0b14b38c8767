"""Acceptance profiles from a published mean accepted length (issue 18; dfvg_dse/tree/from_tau.py):
each shipped derived profile reproduces its row's tau, checked by sampling rounds on the tree (the
simulator's walk, not the expected-tokens algebra); the command writes what ships; bad input is one
line and exit 2."""

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dfvg_dse.acceptance import expected_tokens_chain
from dfvg_dse.catalog import Catalog
from dfvg_dse.cli import cli
from dfvg_dse.sim import walk_tree
from dfvg_dse.specs import AcceptanceProfile, InputError
from dfvg_dse.tree import chain, optimal_tree
from dfvg_dse.tree.from_tau import geometric_ranks, rank_probs_from_tau, tokens_per_round

PAIRS = Path(__file__).parents[2] / "models" / "pairs"
DERIVED = sorted(p for p in PAIRS.glob("*.toml") if tomllib.loads(p.read_text()).get("fit", {}).get("method") == "from-tau")


def _sampled_tokens(rank_probs, tree_tokens: int, tree_depth: int, rounds: int = 200_000) -> tuple[float, float]:
    """Mean tokens a round (bonus included) and its standard error, by walking the tree round by round."""
    profile = AcceptanceProfile("t", tuple(rank_probs))
    tree = chain(tree_depth) if tree_tokens == tree_depth else optimal_tree(profile, tree_tokens, tree_depth).tree
    accepted, _ = walk_tree(tree, profile.matrix(tree.depth, max(tree.ranks) + 1), rounds, np.random.default_rng(7))
    return 1.0 + accepted.mean(), accepted.std() / np.sqrt(rounds)


def test_the_shipped_derived_profiles_cover_the_issue_18_drafters():
    methods = {tomllib.loads(p.read_text())["draft"] for p in DERIVED}
    assert {"eagle", "eagle2", "eagle3", "medusa", "pld"} <= methods and len(DERIVED) >= 30


@pytest.mark.parametrize("path", DERIVED, ids=lambda p: p.stem)
def test_each_derived_profile_reproduces_its_published_row(path):
    doc = tomllib.loads(path.read_text())
    fit = doc["fit"]
    source = {s.id: s for s in Catalog.open().measurements("speculative")}[fit["measurements"]]
    row = next(r for r in source.rows if r.where == fit["where"])  # the row it cites still says the same
    assert (row.mean_accepted_tokens, row.tree_tokens, row.tree_depth) == \
        (fit["mean_accepted_tokens"], fit["tree_tokens"], fit["tree_depth"])
    assert row.temperature == doc["temperature"] and row.target == doc["target"]
    mean, stderr = _sampled_tokens(doc["rank"]["probs"], row.tree_tokens, row.tree_depth)
    assert abs(mean - row.mean_accepted_tokens) < 5 * stderr + 1e-3, (mean, row.mean_accepted_tokens)


def test_the_shipped_files_are_what_the_command_writes(tmp_path):
    for source in sorted({tomllib.loads(p.read_text())["fit"]["measurements"] for p in DERIVED}):
        result = CliRunner().invoke(cli, ["acceptance", "from-tau", "--measurements", source, "--method", "eagle",
                                          "--method", "eagle2", "--method", "eagle3", "--method", "medusa",
                                          "--method", "pld", "--out-dir", str(tmp_path)])
        assert result.exit_code == 0, result.output
    written = sorted(tmp_path.glob("*.toml"))
    assert [p.name for p in written] == [p.name for p in DERIVED]
    for new, shipped in zip(written, DERIVED):
        assert tomllib.loads(new.read_text()) == tomllib.loads(shipped.read_text()), new.name


def test_a_chain_solves_leviathans_equation_exactly():
    # PLD on Vicuna-7B, Spec-Bench 2025 leaderboard on A100: tau 1.75 on a 10-token chain
    (alpha,) = rank_probs_from_tau(1.75, 10, 10)
    assert float(expected_tokens_chain(alpha, 10)) == pytest.approx(1.75, abs=1e-5)
    # brute force: the chance of accepting exactly j tokens, summed
    probs = [alpha ** j * (1 - alpha) for j in range(10)] + [alpha ** 10]
    assert sum((j + 1) * p for j, p in enumerate(probs)) == pytest.approx(1.75, abs=1e-5)


def test_tree_tokens_grow_with_the_geometric_parameter_so_the_root_is_unique():
    tokens = [tokens_per_round(geometric_ranks(a), 60, 6) for a in np.linspace(0.01, 0.99, 50)]
    assert all(b > a for a, b in zip(tokens, tokens[1:]))
    assert tokens[0] > 1.0 and tokens[-1] < 7.0


def test_geometric_ranks_are_exclusive():
    ranks = geometric_ranks(0.3)
    assert ranks[0] == 0.3 and ranks[1] == pytest.approx(0.21) and sum(ranks) == pytest.approx(1 - 0.7 ** 8)


@pytest.mark.parametrize("tau, tokens, depth", [(1.0, 10, 10), (7.0, 60, 6), (7.5, 60, 6), (3.0, 4, 6)])
def test_a_tau_no_profile_reaches_is_refused(tau, tokens, depth):
    with pytest.raises(InputError):
        rank_probs_from_tau(tau, tokens, depth)


def test_the_command_writes_one_profile_that_estimate_reads(tmp_path):
    out = tmp_path / "mine.toml"
    runner = CliRunner()
    result = runner.invoke(cli, ["acceptance", "from-tau", "--tau", "3.2", "--tree-tokens", "25", "--tree-depth", "5",
                                 "--name", "mine", "-o", str(out)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["tree", "optimize", "--acceptance", str(out), "--budget", "25", "--max-depth", "5",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["expected_tokens"] == pytest.approx(3.2, abs=1e-4)
    again = runner.invoke(cli, ["acceptance", "from-tau", "--tau", "3.2", "--tree-tokens", "25", "--tree-depth", "5",
                                "--name", "mine", "-o", str(out)])
    assert again.exit_code == 2 and "already exists" in again.stderr


@pytest.mark.parametrize("argv, words", [
    (["--tau", "9", "--tree-tokens", "60", "--tree-depth", "6", "--name", "x", "-o", "OUT"], "must lie in (1, 7)"),
    (["--tau", "3", "--tree-depth", "6"], "missing --tree-tokens, --name, --output"),
    (["--measurements", "spec-eagle3-paper"], "missing --out-dir"),
    (["--measurements", "spec-eagle3-paper", "--out-dir", "D", "--tau", "3"], "--tau: not used with --measurements"),
    (["--measurements", "spec-eagle3-pape", "--out-dir", "D"], "did you mean spec-eagle3-paper"),
    (["--measurements", "spec-sequoia-paper", "--out-dir", "D"], "no row drafted by a head or a lookup"),
])
def test_bad_from_tau_input_is_one_line(tmp_path, argv, words):
    argv = [str(tmp_path / "x.toml") if a == "OUT" else str(tmp_path / "d") if a == "D" else a for a in argv]
    result = CliRunner().invoke(cli, ["acceptance", "from-tau", *argv])
    assert result.exit_code == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing half-written
