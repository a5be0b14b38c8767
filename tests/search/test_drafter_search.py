"""The drafter as a search dimension (issue 18; `search --drafter`): one run per drafter, the joint
front checked against a brute-force dominance scan of the runs' own fronts, each pick the trial of
its run, the parent's export equal to that run's export, deterministic, bad input one line."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli

DRAFTERS = ["--drafter", "qwen3-0.6b", "--drafter", "eagle3-qwen3-8b=0.8", "--drafter", "prompt-lookup=0.4"]
NAMES = ["qwen3-0.6b", "eagle3-qwen3-8b", "prompt-lookup"]


@pytest.fixture(scope="module")
def joint(tmp_path_factory):
    base = tmp_path_factory.mktemp("drafters")
    result = CliRunner().invoke(cli, ["search", "--target", "qwen3-8b", *DRAFTERS, "--results-dir", str(base),
                                      "--run-id", "j", "--json"])
    assert result.exit_code == 0, result.output
    return base / "j", json.loads(result.stdout)


def _dominated(values: np.ndarray) -> np.ndarray:
    """Brute force: a point is dominated when another is at least as fast and as cheap, better in one."""
    out = np.zeros(len(values), dtype=bool)
    for i, (speed, cost) in enumerate(values):
        better = (values[:, 0] >= speed) & (values[:, 1] <= cost) & ((values[:, 0] > speed) | (values[:, 1] < cost))
        out[i] = better.any()
    return out


def test_every_drafter_is_a_complete_run(joint):
    path, summary = joint
    for name in NAMES:
        manifest = json.loads((path / name / "manifest.json").read_text())
        assert manifest["status"] == "finished" and manifest["inputs"]["draft"] == name
    assert summary["trials"] == sum(len(pd.read_csv(path / n / "trials.csv")) for n in NAMES)


def test_the_joint_front_is_the_front_of_the_union(joint):
    path, summary = joint
    union = pd.concat([pd.read_csv(path / n / "trials.csv").assign(drafter=n) for n in NAMES], ignore_index=True)
    union = union[union["feasible"]]
    values = union[["tokens_per_s_per_sequence", "j_per_token"]].to_numpy()
    expected = union[~_dominated(values)]
    front = pd.read_csv(path / "pareto.csv")
    key = ["drafter", "run_trial"]
    assert sorted(map(tuple, front[key].to_numpy().tolist())) == \
        sorted(map(tuple, expected.assign(run_trial=expected["trial"])[key].to_numpy().tolist()))
    assert set(summary["front_drafters"]) == set(expected["drafter"])
    assert sum(summary["front_share"].values()) == len(front)


def test_each_pick_is_the_trial_of_its_run(joint):
    path, _ = joint
    picks = json.loads((path / "recommended.json").read_text())
    assert set(picks) == {"max-throughput", "min-energy", "knee"}
    for design in picks.values():
        row = pd.read_csv(path / design["run"] / "trials.csv").set_index("trial").loc[design["run_trial"]]
        assert design["draft"] == design["run"]
        assert design["expected"]["tokens_per_s_per_sequence"] == pytest.approx(row["tokens_per_s_per_sequence"])
        assert (design["schedule"], design["batch"], design["draft_device"]) == \
            (row["schedule"], row["batch"], row["draft_device"])


def test_the_parents_export_is_its_runs_export(joint):
    path, _ = joint
    runner = CliRunner()
    picks = json.loads((path / "recommended.json").read_text())
    for pick in ("knee", "max-throughput"):
        parent = runner.invoke(cli, ["export", str(path), "--pick", pick, "--format", "vllm", "--json"])
        assert parent.exit_code == 0, parent.output
        design = picks[pick]
        direct = runner.invoke(cli, ["export", str(path / design["run"]), "--trial", str(design["run_trial"]),
                                     "--format", "vllm", "--json"])
        assert json.loads(parent.stdout) == json.loads(direct.stdout)


def test_the_same_command_gives_the_same_run(joint, tmp_path):
    path, _ = joint
    again = CliRunner().invoke(cli, ["search", "--target", "qwen3-8b", *DRAFTERS, "--results-dir", str(tmp_path),
                                     "--run-id", "j", "--json"])
    assert again.exit_code == 0
    columns = lambda f: f.drop(columns=[c for c in f.columns if c.startswith("datetime") or c == "duration"])
    pd.testing.assert_frame_equal(columns(pd.read_csv(tmp_path / "j" / "trials.csv")),
                                  columns(pd.read_csv(path / "trials.csv")))


@pytest.mark.parametrize("argv, words", [
    (["--drafter", "qwen3-0.6b"], "give 2 to 16 drafters"),
    (["--drafter", "qwen3-0.6b", "--drafter", "qwen3-0.6b=0.7"], "given twice"),
    (["--drafter", "qwen3-0.6b", "--drafter", "prompt-lookup="], "expected NAME or NAME=ACCEPTANCE"),
    (["--drafter", "qwen3-0.6b", "--drafter", "prompt-lookup=0.4", "--draft", "qwen3-1.7b"], "--draft: not with --drafter"),
    (["--drafter", "qwen3-0.6b", "--drafter", "prompt-lookup=0.4", "--resume"], "--resume: not with --drafter"),
    (["--drafter", "qwen3-0.6b", "--drafter", "eagle3-qwen3-8x=0.8"], "did you mean eagle3-qwen3-8b"),
    (["--drafter", "qwen3-0.6b", "--drafter", "prompt-lookup=1.5"], "must be a probability in [0, 1]"),
])
def test_bad_drafter_input_is_one_line_and_writes_nothing(tmp_path, argv, words):
    result = CliRunner().invoke(cli, ["search", "--target", "qwen3-8b", *argv, "--results-dir", str(tmp_path / "r"),
                                      "--run-id", "x"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert words in result.stderr, result.stderr
    assert not (tmp_path / "r" / "x").exists()


def test_a_parent_trial_is_refused_with_the_way_to_its_run(joint):
    path, _ = joint
    result = CliRunner().invoke(cli, ["export", str(path), "--trial", "0"])
    assert result.exit_code == 2 and f"{path}/NAME --trial N" in result.stderr
