"""The reference engine against transformers on tiny checkpoints that transformers itself saved
(tests/reference/hf_fixtures/, made by make_hf_fixtures.py): every family, every RoPE type, both
config styles. Logits, greedy output and speculative output (in process and through the CLI) must
equal transformers' stored outputs; the same weights with plain RoPE must not, so these tests can
fail. Only the last test needs torch: it remakes fixtures live and compares again."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dfvg_dse.catalog.checkpoints import forward_settings, read_checkpoint
from dfvg_dse.cli import cli
from dfvg_dse.reference import Model, ReferenceConfig, generate_ar, generate_speculative
from dfvg_dse.specs.rope import ROPE_TYPES, RopeSpec

FIXTURES = Path(__file__).parent / "hf_fixtures"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file())
DRAFT = FIXTURES / "draft"
TOL = 3e-4  # float32 rounding of logits up to ~20 over two layers; observed <= 5e-5 (transformers vs float64)
# (parents, ranks) of static trees, root first: a chain of 4 and a 2-wide, 3-deep tree
TREES = {"chain4": ([-1, 0, 1, 2, 3], [0, 0, 0, 0, 0]), "tree": ([-1, 0, 0, 1, 1, 3], [0, 0, 1, 0, 1, 0])}


def expected(folder: Path) -> tuple[dict, dict]:
    with np.load(folder / "expected.npz") as arrays:
        return json.loads((folder / "expected.json").read_text()), dict(arrays)


def load(folder: Path, rope: RopeSpec | None = None) -> Model:
    """The folder through the catalog, as `reference generate` loads it (optionally with another rope)."""
    config, spec, tensors = read_checkpoint(folder)
    settings = forward_settings(folder, config, spec)
    return Model(tensors, ReferenceConfig(spec, rope=rope or settings.rope, rms_norm_eps=settings.rms_norm_eps))


def context(rope: RopeSpec) -> int:
    """Where the scaling starts to matter: the original context, or dynamic NTK's unscaled length."""
    return rope.max_positions if rope.rope_type == "dynamic" else rope.original_max_positions


def test_fixtures_cover_every_family_rope_type_and_config_style():
    seen = set()
    for name in NAMES:
        record, _ = expected(FIXTURES / name)
        config = json.loads((FIXTURES / name / "config.json").read_text())
        if record["style"] == "v5":  # what transformers 5 writes
            assert "rope_parameters" in config and "rope_theta" not in config and "rope_scaling" not in config
        else:  # transformers 4's keys
            assert "rope_parameters" not in config and "rope_theta" in config and "rope_scaling" in config
        assert load(FIXTURES / name).config.rope.rope_type == record["rope_type"] == name.split("-")[1]
        seen.add((record["family"], record["rope_type"], record["style"]))
    assert {f for f, _, _ in seen} == {"llama", "mistral", "qwen2", "qwen3"}
    assert {(t, s) for _, t, s in seen} == {(t, s) for t in ROPE_TYPES for s in ("v4", "v5")}
    assert {(f, s) for f, _, s in seen} == {(f, s) for f in ("llama", "mistral", "qwen2", "qwen3")
                                            for s in ("v4", "v5")}
    assert sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file()) < 1_500_000


def check_against(folder: Path, record: dict, arrays: dict) -> None:
    """Logits and greedy output of the engine equal transformers'; plain RoPE's do not."""
    model = load(folder)
    rope = model.config.rope
    plain = load(folder, RopeSpec(theta=10000.0))
    for case, prompt in record["prompts"].items():
        want = arrays[f"logits_{case}"]
        got = model.fresh().run(prompt, np.arange(len(prompt)))
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
        greedy = record["greedy"][case]
        assert generate_ar(model.fresh(), prompt, len(greedy)) == greedy
    # the test has power: what a reader that ignores the config's RoPE would get
    long = record["prompts"]["long"]
    assert np.max(np.abs(plain.run(long, np.arange(len(long))) - arrays["logits_long"])) > 100 * TOL
    if rope.rope_type in ("dynamic", "llama3", "yarn", "longrope"):  # positions past the original context
        short = record["prompts"]["short"]
        assert len(short) <= context(rope) < len(short) + len(record["greedy"]["short"])
        assert len(long) > context(rope)


@pytest.mark.parametrize("name", NAMES)
def test_logits_and_greedy_output_equal_transformers(name):
    check_against(FIXTURES / name, *expected(FIXTURES / name))


@pytest.mark.parametrize("name", NAMES)
def test_speculative_output_equals_transformers_greedy_output(name):
    record, _ = expected(FIXTURES / name)
    target, draft = load(FIXTURES / name), load(DRAFT)
    for case, prompt in record["prompts"].items():
        greedy = record["greedy"][case]
        for drafter in (draft, target):  # a weak draft (rejections) and a perfect one (deep acceptances)
            for parents, ranks in TREES.values():
                out, _ = generate_speculative(target.fresh(), drafter.fresh(), prompt, len(greedy), parents, ranks)
                assert out == greedy, (case, parents)


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("name", NAMES)
def test_reference_generate_spec_equals_transformers_greedy_output(run, name):
    record, _ = expected(FIXTURES / name)
    for case, draft, tree in (("short", DRAFT, "kary:2x2"), ("long", FIXTURES / name, "chain:3")):
        prompt, greedy = record["prompts"][case], record["greedy"][case]
        result = run("reference", "generate", "--target", str(FIXTURES / name), "--draft", str(draft), "--mode",
                     "spec", "--tree", tree, "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens",
                     str(len(greedy)), "--json")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["tokens"] == greedy, case


def test_a_tree_forward_rotates_each_node_at_its_own_length():
    # dynamic NTK: a verify forward over positions 20..24 must give the logits that decoding the
    # tokens one at a time gives (a chain forward would run all five at length 25)
    folder = FIXTURES / "mistral-dynamic-v5"
    record, _ = expected(folder)
    model = load(folder)
    prompt = record["prompts"]["long"][:20]
    steps = model.fresh()
    steps.run(prompt, np.arange(20))
    one_by_one = np.concatenate([steps.run([t], [20 + i]) for i, t in enumerate([3, 5, 7, 9, 11])])
    tree, chain = model.fresh(), model.fresh()
    for m in (tree, chain):
        m.run(prompt, np.arange(20))
    as_tree = tree.run([3, 5, 7, 9, 11], np.arange(20, 25), [-1, 0, 1, 2, 3])
    as_chain = chain.run([3, 5, 7, 9, 11], np.arange(20, 25))
    np.testing.assert_allclose(as_tree, one_by_one, rtol=0, atol=1e-5)
    assert np.max(np.abs(as_chain - one_by_one)) > 1e-3  # the distinction matters at these lengths


@pytest.mark.torch
@pytest.mark.parametrize("name", ["qwen3-default-v5", "llama-linear-v4", "mistral-dynamic-v5", "llama-llama3-v4",
                                  "mistral-yarn-mscale-v5", "qwen3-longrope-v4"])
def test_fixtures_made_live_by_the_installed_transformers(tmp_path, name):
    pytest.importorskip("torch")
    pytest.importorskip("transformers", minversion="5.0")
    import make_hf_fixtures

    record = make_hf_fixtures.build(name, tmp_path / name)
    check_against(tmp_path / name, *expected(tmp_path / name))
    stored, _ = expected(FIXTURES / name)
    assert record["prompts"] == stored["prompts"] and record["rope_type"] == stored["rope_type"]
    assert dataclasses.asdict(load(tmp_path / name).config.rope) == dataclasses.asdict(
        load(FIXTURES / name).config.rope)
