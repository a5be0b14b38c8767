"""The shipped pair sized for the torch backend, `builtin:small` (issue 19): a target whose
bfloat16 verification is memory-bound on a CPU and a much cheaper draft, trained with the shipped
recipe; size, acceptance, and lossless bfloat16 speculative decoding end to end (its training
cards: test_shipped_pair.py)."""

import json

import pytest
from click.testing import CliRunner

from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.lookup import shipped_data_dir
from dfvg_dse.cli import cli
from dfvg_dse.reference import Model, ReferenceConfig, greedy_agreement

PAIR = shipped_data_dir("models") / "reference" / "small"


def _load(role: str) -> Model:
    _, spec, tensors, _ = Catalog.read_checkpoint("builtin:small", role)
    return Model(tensors, ReferenceConfig(spec))


def test_the_target_is_tens_of_megabytes_in_16_bits_and_the_draft_far_cheaper():
    target, draft = (sum(t.size for t in Catalog.read_checkpoint("builtin:small", r)[2].values()) for r in
                     ("target", "draft"))
    assert 2 * target >= 20e6 and draft <= target / 30
    # shipped in float16 (numpy reads it; half the bytes): the pair stays small enough to travel
    assert sum(p.stat().st_size for p in PAIR.rglob("*") if p.is_file()) <= 32 * 2**20


def test_the_draft_is_good_enough_to_matter():
    prompts = Catalog.read_reference_prompts(split="held-out")[:4]
    agree = [greedy_agreement(_load("target"), _load("draft"), list(p["text"].encode()), 32) for p in prompts]
    assert sum(a for a, _ in agree) / sum(n for _, n in agree) >= 0.6


@pytest.mark.torch
@pytest.mark.parametrize("drafting", [["--tree", "chain:4", "--schedule", "overlap"], ["--dynamic", "adapt"],
                                      ["--tree", "chain:3", "--draft-backend", "numpy"]])
def test_bfloat16_speculative_decoding_of_the_small_pair_is_lossless(drafting):
    pytest.importorskip("torch")
    runner = CliRunner()
    common = ["reference", "generate", "--target", "builtin:small", "--prompt", "def main(argv):\n    ",
              "--max-new-tokens", "32", "--backend", "torch", "--dtype", "bfloat16", "--json", "--no-pin"]
    ar = json.loads(runner.invoke(cli, common + ["--mode", "ar"], catch_exceptions=False).stdout)
    spec = json.loads(runner.invoke(cli, common + drafting, catch_exceptions=False).stdout)
    assert spec["tokens"] == ar["tokens"] and len(ar["tokens"]) == 32
    assert spec["mean_accepted_per_round"] > 1.0
    assert spec["backend"] == ("torch bfloat16 on cpu, draft numpy float32" if "numpy" in drafting
                               else "torch bfloat16 on cpu")
