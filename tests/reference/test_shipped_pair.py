"""The shipped tiny pair (models/reference/): provenance, size, the draft is good enough to matter
(greedy token acceptance >= 0.6 on held-out prompts), and the commands that use it."""

import csv
import json

import numpy as np
import pytest
from click.testing import CliRunner

from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.lookup import shipped_data_dir
from dfvg_dse.cli import cli
from dfvg_dse.reference import Model, ReferenceConfig, greedy_agreement

PAIR = shipped_data_dir("models") / "reference"


def load(role: str) -> Model:
    _, spec, tensors, _ = Catalog.read_checkpoint("builtin:tiny", role)
    return Model(tensors, ReferenceConfig(spec))


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("pair, folder, role, low, high", [
    ("builtin:tiny", "", "target", 2e6, 8e6), ("builtin:tiny", "", "draft", 1e5, 5e5),
    ("builtin:small", "small", "target", 1e7, 3e7), ("builtin:small", "small", "draft", 1e5, 5e5)])
def test_card_matches_the_weights(pair, folder, role, low, high):
    card = json.loads((PAIR / folder / role / "training.json").read_text())
    counted = sum(t.size for t in Catalog.read_checkpoint(pair, role)[2].values())  # tied head: once
    assert card["parameters"] == counted and low <= counted <= high
    assert card["steps"] > 0 and "standard library" in card["data"] and card["held_out_bits_per_byte"] < 4


def test_pair_fits_the_size_budget():
    tiny = [p for p in PAIR.rglob("*") if p.is_file() and "small" not in p.relative_to(PAIR).parts]
    assert sum(p.stat().st_size for p in tiny) <= 25 * 2**20


def test_draft_is_good_enough_to_matter():
    prompts = Catalog.read_reference_prompts(split="held-out")[:6]
    agree = [greedy_agreement(load("target"), load("draft"), list(p["text"].encode()), 48) for p in prompts]
    acceptance = sum(a for a, _ in agree) / sum(n for _, n in agree)
    assert acceptance >= 0.6


@pytest.mark.parametrize("drafting", [["--tree", "chain:4", "--schedule", "sequential"],
                                      ["--tree", "chain:4", "--schedule", "overlap"],
                                      ["--tree", "kary:2x2", "--schedule", "overlap", "--link", "pcie-gen4-x16-p2p"],
                                      ["--dynamic", "adapt", "--schedule", "overlap"],
                                      ["--dynamic", "eagle2"]])
def test_generate_text_with_the_shipped_pair_is_lossless(run, drafting):
    common = ["reference", "generate", "--prompt", "def main(argv):\n    ", "--max-new-tokens", "40", "--json"]
    ar = json.loads(run(*common, "--mode", "ar").stdout)
    spec = json.loads(run(*common, *drafting).stdout)
    assert spec["tokens"] == ar["tokens"] and len(ar["tokens"]) == 40
    assert ar["text"] == bytes(ar["tokens"]).decode("utf-8", "replace")
    assert spec["mean_accepted_per_round"] > 1.0  # a real draft: more than one token kept per round
    assert spec["link_bytes"] >= 16 * (40 + spec["rounds"])  # every kept token and every round's bonus crossed
    if "overlap" in drafting:
        assert spec["overlap_hits"] + spec["overlap_misses"] == spec["rounds"] - 1 and spec["overlap_hits"] > 0


def test_bench_writes_its_table(run, tmp_path):
    out = tmp_path / "bench.csv"
    result = run("reference", "bench", "--count", "1", "--max-new-tokens", "16", "--repeats", "1",
                 "--trees", "chain:2,kary:2x2", "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    rows = list(csv.DictReader(out.open()))
    assert [(r["tree"], r["schedule"]) for r in rows] == [("", ""), ("chain:2", "sequential"), ("chain:2", "overlap"),
                                                         ("kary:2x2", "sequential"), ("kary:2x2", "overlap")]
    assert len(record["rows"]) == 5
    ar_rate = float(rows[0]["tokens_per_s"])
    for row in rows[1:]:
        assert float(row["speedup"]) == pytest.approx(float(row["tokens_per_s"]) / ar_rate)
    assert 0.0 <= record["greedy_token_acceptance"] <= 1.0
    for row in rows[1:]:
        assert (row["overlap_hit_rate"] == "") == (row["schedule"] == "sequential")


def test_bench_runs_dynamic_rules_and_refuses_unknown_names(run, tmp_path):
    out = tmp_path / "bench.csv"
    result = run("reference", "bench", "--count", "1", "--max-new-tokens", "12", "--repeats", "1", "--trees", "",
                 "--dynamic", "adapt,eagle2", "--schedules", "sequential", "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    assert [(r["tree"], r["schedule"]) for r in json.loads(result.stdout)["rows"]] == [
        ("", ""), ("adapt", "sequential"), ("eagle2", "sequential")]
    for bad in (["--dynamic", "medusa"], ["--schedules", "sequential,eager"]):
        result = run("reference", "bench", "--count", "1", *bad, "-o", str(tmp_path / "x.csv"))
        assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "x.csv").exists()


def test_bad_prompt_set_and_builtin_names_are_one_line(run, tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": 0, "text": ""}\n')
    result = run("reference", "bench", "--prompts", str(bad), "-o", str(tmp_path / "b.csv"))
    assert result.exit_code == 2 and "field 'text'" in result.stderr and not (tmp_path / "b.csv").exists()
    result = run("reference", "generate", "--target", "builtin:huge", "--prompt", "x")
    assert result.exit_code == 2 and "builtin:tiny" in result.stderr
    result = run("reference", "generate", "--prompt", "x", "--prompt-ids", "1")
    assert result.exit_code == 2 and "exactly one" in result.stderr
    result = run("reference", "generate", "--prompt", "x", "--tree", "chain:3", "--dynamic", "adapt")
    assert result.exit_code == 2 and "not both" in result.stderr


def test_prompt_set_has_both_halves():
    splits = [p["split"] for p in Catalog.read_reference_prompts()]
    assert splits.count("calibration") == splits.count("held-out") > 0
    assert np.all([isinstance(p["source"], str) for p in Catalog.read_reference_prompts()])
