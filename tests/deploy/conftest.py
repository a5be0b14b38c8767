"""The designs issue 15 names: the three picks and 20 random feasible trials of the 500-trial
default search, exported once per session for every engine."""

import json
import random

import pandas as pd
import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli

RANDOM_TRIALS = 20
ENGINES = ("vllm", "sglang", "hf", "trtllm")
PICKS = ("max-throughput", "min-energy", "knee")


@pytest.fixture(scope="session")
def default_exports(tmp_path_factory) -> dict:
    """{engine: [(design, export), ...]}."""
    runs = tmp_path_factory.mktemp("runs")
    runner = CliRunner()
    # the 500 trials of the default space sampled (the default search itself is exact since issue 16)
    assert runner.invoke(cli, ["search", "--method", "optuna", "--results-dir", str(runs), "--run-id", "d"]).exit_code == 0
    run = runs / "d"
    out = {engine: [] for engine in ENGINES}
    for engine in ENGINES:
        picks = json.loads(runner.invoke(cli, ["export", str(run), "--pick", "all", "--format", engine,
                                               "--json"]).stdout)
        out[engine] += list(zip(PICKS, picks))
    trials = pd.read_csv(run / "trials.csv")
    feasible = sorted(int(t) for t in trials[trials["feasible"]]["trial"])
    for trial in random.Random(0).sample(feasible, RANDOM_TRIALS):
        for engine in ENGINES:
            result = runner.invoke(cli, ["export", str(run), "--trial", str(trial), "--format", engine, "--json"])
            assert result.exit_code == 0, result.output
            out[engine].append((f"trial-{trial}", json.loads(result.stdout)))
    assert all(len(v) == len(PICKS) + RANDOM_TRIALS for v in out.values())
    return out
