"""Search: Pareto kernels, grid consistency, determinism, persistence, resume after kill -9, workers."""

import json
import os
from collections import Counter
import signal
import subprocess
import sys
import time

import numpy as np
import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dfvg_dse.pipeline import estimate
from dfvg_dse.pipeline.grid import SCHEDULE_CHOICES, build_grid, build_shapes, evaluate_points, point_config
from dfvg_dse.pipeline.pareto import hypervolume, pareto_mask
from dfvg_dse.search import completed, run_search, sweep_frame, trials_frame
from dfvg_dse.search.studies import storage
from studyfile import states  # tests/search/studyfile.py


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=40))
def test_pareto_mask_against_brute_force(points):
    values = np.array(points)
    mask = pareto_mask(values)
    for i, (x, y) in enumerate(values):
        dominated = any((a >= x and b <= y) and (a > x or b < y) for a, b in values)
        if dominated:
            assert not mask[i]
        else:  # kept, unless an identical point was kept in its place
            assert mask[i] or any(mask[j] and values[j, 0] == x and values[j, 1] == y for j in range(len(values)))
    front = values[mask]
    assert not any((a >= x and b <= y and (a > x or b < y)) for x, y in front for a, b in values)


def test_hypervolume_is_the_dominated_area():
    front = np.array([[3.0, 1.0], [2.0, 0.5], [1.0, 0.2]])
    # staircase from the reference (0, 2): 3 x (2 - 1) + 2 x (1 - 0.5) + 1 x (0.5 - 0.2)
    assert hypervolume(front, (0.0, 2.0)) == pytest.approx(3 + 1 + 0.3)
    rng = np.random.default_rng(0)  # Monte Carlo check
    samples = rng.uniform([0, 0], [3, 2], size=(200_000, 2))
    covered = np.any((samples[:, None, 0] <= front[None, :, 0]) & (samples[:, None, 1] >= front[None, :, 1]), axis=1)
    assert covered.mean() * 6 == pytest.approx(4.3, rel=0.02)


def test_grid_points_match_the_pipeline_estimate(small_space):
    shapes, _ = build_shapes(small_space)
    grid = build_grid(small_space, shapes)
    drafts = [d for d, _, _ in grid.drafts]
    ev = evaluate_points(small_space, shapes, drafts, grid.shape_idx, grid.draft_idx, grid.verify_idx,
                         grid.schedule_idx, grid.batch)
    for i in np.random.default_rng(1).choice(len(grid.shape_idx), 25, replace=False):
        config = point_config(small_space, shapes[grid.shape_idx[i]], drafts[grid.draft_idx[i]],
                              small_space.verify_devices[grid.verify_idx[i]], SCHEDULE_CHOICES[grid.schedule_idx[i]],
                              int(grid.batch[i]))
        est = estimate(config)
        assert bool(ev.feasible[i]) == est.feasible
        if est.feasible:
            assert ev.tokens_per_s[i] == pytest.approx(est.tokens_per_s, rel=1e-9)
            assert ev.j_per_token[i] == pytest.approx(est.energy.j_per_token, rel=1e-9)


def test_sweep_covers_the_grid_and_keeps_infeasible_points(small_space):
    import dataclasses
    frame = sweep_frame(dataclasses.replace(small_space, widths=(1, 2, 16), fpga_pe_fractions=(0.25,)))
    assert len(frame) > 100 and (~frame["feasible"]).any()
    assert (frame.loc[~frame["feasible"], "reason"] != "").all()  # every infeasible point says why
    assert frame.loc[~frame["feasible"], "reason"].str.contains("lanes").any()


def test_search_is_deterministic_and_persists_every_trial(small_space, tmp_path):
    a = run_search(small_space, f"sqlite:///{tmp_path / 'a.db'}", "a", 40, seed=3)
    b = run_search(small_space, f"sqlite:///{tmp_path / 'b.db'}", "b", 40, seed=3)
    va = [t.values for t in a.get_trials(states=(optuna.trial.TrialState.COMPLETE,))]
    vb = [t.values for t in b.get_trials(states=(optuna.trial.TrialState.COMPLETE,))]
    assert len(va) == 40 and va == vb
    frame = trials_frame(a)
    assert {"family", "schedule", "tokens_per_s", "j_per_token", "feasible", "reason"} <= set(frame.columns)


def test_resume_continues_to_the_target_without_losing_trials(small_space, tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    first = run_search(small_space, url, "r", 25, seed=1)
    before = Counter((json.dumps(t.params, sort_keys=True), tuple(t.values)) for t in first.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    again = run_search(small_space, url, "r", 60, seed=1, resume=True)
    after = Counter((json.dumps(t.params, sort_keys=True), tuple(t.values)) for t in again.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    assert completed(again) == 60 and not before - after


@pytest.mark.slow
def test_kill_9_then_resume_loses_no_completed_trial(tmp_path, small_study):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "dfvg_dse", "search", "--method", "optuna", "--study", str(small_study), "--trials", "2000",
               "--results-dir", str(tmp_path), "--run-id", "killed", "--json"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = tmp_path / "killed" / "study.journal"
    deadline = time.time() + 120
    while states(db).get("COMPLETE", 0) < 30 and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    study = optuna.load_study(study_name="killed", storage=storage(f"journal:{db}"))
    before = Counter((json.dumps(t.params, sort_keys=True), tuple(t.values))
                     for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    n_before = sum(before.values())
    assert 30 <= n_before < 2000
    resumed = subprocess.run([sys.executable, "-m", "dfvg_dse", "search", "--method", "optuna", "--study", str(small_study), "--trials",
                              str(n_before + 20), "--results-dir", str(tmp_path), "--run-id", "killed",
                              "--resume", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    study = optuna.load_study(study_name="killed", storage=storage(f"journal:{db}"))
    after = Counter((json.dumps(t.params, sort_keys=True), tuple(t.values))
                    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    assert not before - after and sum(after.values()) == n_before + 20  # nothing completed was lost
    assert json.loads(resumed.stdout)["trials"] == n_before + 20


@pytest.mark.slow
def test_several_workers_share_one_sqlite_study(small_space, tmp_path):
    study = run_search(small_space, f"sqlite:///{tmp_path / 'w.db'}", "w", 30, seed=0, n_workers=2)
    assert completed(study) == 30


@pytest.mark.slow
def test_several_workers_share_one_postgresql_study(small_space, postgres_url):
    study = run_search(small_space, postgres_url, "pg-study", 30, seed=0, n_workers=2)
    assert completed(study) == 30
    again = run_search(small_space, postgres_url, "pg-study", 40, seed=0, resume=True)
    assert completed(again) == 40


def test_resume_refuses_a_different_space(tmp_path, small_study):
    from click.testing import CliRunner
    from dfvg_dse.cli import cli
    runner = CliRunner()
    first = runner.invoke(cli, ["search", "--method", "optuna", "--study", str(small_study), "--trials", "10", "--results-dir",
                                str(tmp_path), "--run-id", "x", "--json"])
    assert first.exit_code == 0, first.stderr
    other = runner.invoke(cli, ["search", "--method", "optuna", "--resume", "--run-id", "x", "--draft-device", "u280", "--trials", "20",
                                "--results-dir", str(tmp_path)])
    assert other.exit_code == 2 and "differ from those run 'x' started with" in other.stderr
    same = runner.invoke(cli, ["search", "--method", "optuna", "--resume", "--trials", "20", "--results-dir", str(tmp_path), "--json"])
    assert same.exit_code == 0 and json.loads(same.stdout)["trials"] == 20  # the saved study file is reused
