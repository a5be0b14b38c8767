"""Fuzz of runs (issue 13): sequences of search, --resume and --force, each maybe killed with
SIGKILL at a random moment (start-up, mid-search, the final writes), must always leave a
consistent run: no completed trial lost or changed, a folder that says finished only when every
file agrees, the last finished run kept through a killed --force, and a final --resume that ends
at exactly its target. CI draws EXAMPLES sequences of up to three steps (derandomized)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter  # noqa: F401 (the type of what _trials returns)
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from dfvg_dse.export import is_finished
from dfvg_dse.files import TEMPORARY
from studyfile import completed_trials as _trials  # tests/search/studyfile.py

EXAMPLES = 6
STUDY = """
[models]
target = "qwen3-8b"
draft = "qwen3-0.6b"
[hardware]
verify_devices = ["rtx-4090"]
draft_devices = ["v80", "rtx-4090"]
[space]
families = ["chain", "seq"]
widths = [1, 2, 4]
depths = [2, 4]
batches = [1, 2]
fpga_pe_fractions = [1.0]
fpga_clocks_mhz = [300.0]
"""
STEP = st.tuples(st.sampled_from(["new", "resume", "force"]), st.integers(5, 60),
                 st.one_of(st.none(), st.floats(0.3, 7.0)))


def _step(base: Path, study: Path, op: str, trials: int, kill_after: float | None) -> int | None:
    args = [sys.executable, "-m", "dfvg_dse", "search", "--method", "optuna", "--study", str(study), "--trials", str(trials),
            "--results-dir", str(base), "--run-id", "r", "--json"]
    args += {"new": [], "resume": ["--resume"], "force": ["--force"]}[op]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            process.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
    _, err = process.communicate(timeout=600)
    assert "Traceback" not in err, err[-3000:]
    return process.returncode


def _check_folder(run: Path) -> None:
    """A folder that says finished agrees with its study; no orphaned temporary file is left."""
    if is_finished(run):
        manifest = json.loads((run / "manifest.json").read_text())
        frame = pd.read_csv(run / "trials.csv")
        assert len(frame) == manifest["summary"]["trials"] == sum(_trials(run / "study.journal").values())
        assert (run / "recommended.json").is_file() and (run / "pareto.png").stat().st_size > 0


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=3))
def test_killed_runs_stay_consistent(steps):
    with tempfile.TemporaryDirectory() as folder:
        base, study = Path(folder) / "results", Path(folder) / "study.toml"
        study.write_text(STUDY)
        run, aside = base / "r", base / ".r.replaced"
        finished: Counter | None = None  # the trials of the last finished run
        for op, trials, kill_after in steps:
            before = _trials(run / "study.journal")
            code = _step(base, study, op, trials, kill_after)
            killed = code == -signal.SIGKILL
            assert killed or code in (0, 2)
            after = _trials(run / "study.journal")
            if op == "resume" and code != 2:
                assert not before - after  # nothing completed was lost or changed
            if not killed and code == 0:
                assert sum(after.values()) == max(trials, sum(before.values()) if op == "resume" else 0)
                assert is_finished(run) and not aside.exists()
                finished = after
            elif killed and op == "force" and is_finished(run) and not aside.exists() and after != before:
                # killed on its way out, after the new run finished and dropped the old one (a kill before
                # the force set the old run aside leaves it as it was: after == before)
                assert sum(after.values()) == trials
                finished = after
            elif op == "force" and finished is not None:  # the last finished run survives somewhere, whole
                kept = [_trials(p / "study.journal") for p in (run, aside) if is_finished(p)]
                assert any(not finished - k for k in kept)
            for p in (run, aside):
                if p.is_dir():
                    _check_folder(p)
        if not run.is_dir():
            return
        total = max(sum(_trials(run / "study.journal").values()), 1) + 5
        assert _step(base, study, "resume", total, None) == 0
        assert sum(_trials(run / "study.journal").values()) == total and is_finished(run)
        _check_folder(run)
        assert not [p for p in run.iterdir() if TEMPORARY.match(p.name)]
