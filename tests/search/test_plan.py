"""Issue 16: exact where the grid is small, seeded where it is large, and the bookkeeping that keeps
sampling linear. Each piece is checked against an independent computation: enumeration with
itertools, the per-trial path, Optuna's own NSGA-II, a fresh read of the study."""

import dataclasses
import itertools
import json

import numpy as np
import optuna
import pandas as pd
import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli
from dfvg_dse.pipeline.grid import (SCHEDULE_CHOICES, build_grid, draft_variants, evaluate_grid, grid_chunks,
                                    grid_front, grid_size, sample_grid)
from dfvg_dse.pipeline.pareto import hypervolume, pareto_mask
from dfvg_dse.search import prepare, suggest_point, evaluate_point, sweep_frame
from dfvg_dse.search import run as run_module
from dfvg_dse.search.designs import grid_designs
from dfvg_dse.search.run import plan_search
from dfvg_dse.search.samplers import LinearNSGAII
from dfvg_dse.search.studies import StudyTally, ledger
from dfvg_dse.specs import InputError

optuna.logging.set_verbosity(optuna.logging.ERROR)


@pytest.fixture(scope="module")
def wide_space(small_space, catalog):
    """The small space with a second verifier that is also a drafter: same-device points exist."""
    return dataclasses.replace(small_space, verify_devices=(catalog.device("rtx-4090"), catalog.device("l40s")),
                               schedules=("overlap", "sequential", "overlap-fill"))


def test_the_grid_is_every_combination_less_overlap_on_one_device(wide_space):
    shapes = prepare(wide_space).shapes
    drafts = draft_variants(wide_space)
    grid = build_grid(wide_space, shapes)
    expected = [(s, d, v, SCHEDULE_CHOICES.index(k), b) for s, d, v, k, b in itertools.product(
        range(len(shapes)), range(len(drafts)), range(len(wide_space.verify_devices)), wide_space.schedules,
        wide_space.batches) if drafts[d][0].name != wide_space.verify_devices[v].name or k == "sequential"]
    got = list(zip(grid.shape_idx, grid.draft_idx, grid.verify_idx, grid.schedule_idx, grid.batch))
    assert got == expected
    assert grid_size(wide_space, shapes) == len(expected)
    chunked = sorted(p for g in grid_chunks(wide_space, shapes, points=100) for p in
                     zip(g.shape_idx, g.draft_idx, g.verify_idx, g.schedule_idx, g.batch))
    assert chunked == sorted(expected)  # the pieces cover the grid once


def test_grid_designs_evaluate_to_their_grid_points(wide_space):
    """Each grid point as trial parameters, asked through Optuna and priced one trial at a time, gives
    the vectorised grid's numbers."""
    grid = build_grid(wide_space, prepare(wide_space).shapes)
    ev = evaluate_grid(wide_space, grid)
    study = optuna.create_study(directions=["maximize", "minimize"])
    for i, params in enumerate(grid_designs(wide_space, grid)):
        study.enqueue_trial(params)
        trial = study.ask()
        record = evaluate_point(wide_space, suggest_point(trial, wide_space))
        assert trial.params == params
        assert record["feasible"] == bool(ev.feasible[i]), (params, record["reason"], ev.reason[i])
        assert record["tokens_per_s_per_sequence"] == pytest.approx(float(ev.tokens_per_s_per_sequence[i]), rel=1e-12)
        assert record["j_per_token"] == pytest.approx(float(ev.j_per_token[i]), rel=1e-12)
        study.tell(trial, (0.0, 0.0))


def test_the_scanned_front_is_the_front_of_the_whole_grid(wide_space):
    frame = sweep_frame(wide_space)
    feasible = frame[frame["feasible"]][["tokens_per_s_per_sequence", "j_per_token"]].to_numpy()
    brute = feasible[pareto_mask(feasible)]
    front = grid_front(wide_space, grid_chunks(wide_space, prepare(wide_space).shapes, points=50))
    assert sorted(map(tuple, front.values)) == sorted(map(tuple, brute))
    assert front.points == len(frame) and front.feasible == len(feasible)
    assert front.worst_cost == feasible[:, 1].max()


def test_a_sample_is_distinct_seeded_and_inside_the_grid(wide_space):
    shapes = prepare(wide_space).shapes
    whole = set(zip(*build_grid(wide_space, shapes)[2:]))
    a, b, c = (sample_grid(wide_space, shapes, 40, seed) for seed in (1, 1, 2))
    points = list(zip(*a[2:]))
    assert 0 < len(points) <= 40 and len(set(points)) == len(points) and set(points) <= whole
    assert points == list(zip(*b[2:])) and points != list(zip(*c[2:]))
    assert len(sample_grid(wide_space, shapes, 10**6, 0).shape_idx) == len(whole)  # larger than the grid: all of it


def test_auto_is_exact_on_a_small_space_and_its_trials_are_the_exact_front(small_space):
    plan = plan_search(small_space, "auto", 500)
    assert plan.method == "exact" and plan.trials(500) == len(plan.queue) == len(plan.front.values)
    frame = sweep_frame(small_space)
    assert plan.grid_points == len(frame)
    speeds = [v[0] for v in plan.front.values[np.argsort(-plan.front.values[:, 0], kind="stable")]]
    assert speeds == sorted(speeds, reverse=True)


def test_past_the_threshold_auto_seeds_the_sampler_from_a_sample(small_space, monkeypatch):
    monkeypatch.setattr(run_module, "EXACT_MAX_POINTS", 100)
    monkeypatch.setattr(run_module, "SEED_POINTS", 200)
    plan = plan_search(small_space, "auto", 40, seed=3)
    assert plan.method == "seeded" and plan.front is None and 0 < len(plan.queue) <= 10  # a quarter of 40
    assert plan.queue == plan_search(small_space, "auto", 40, seed=3).queue  # seeded
    assert "drawn at random" in plan.why


def test_methods_that_cannot_apply_are_one_error(small_space):
    adapt_only = dataclasses.replace(small_space, families=("adapt",))
    with pytest.raises(InputError, match="adapt family"):
        plan_search(dataclasses.replace(small_space, families=("chain", "adapt")), "exact", 10)
    with pytest.raises(InputError, match="no static tree family"):
        plan_search(adapt_only, "seeded", 10)
    assert plan_search(adapt_only, "auto", 10).method == "optuna"
    assert plan_search(dataclasses.replace(small_space, families=("chain", "adapt")), "auto", 10).method == "seeded"


def test_linear_nsga2_samples_what_optunas_nsga2_samples():
    """Same seed, same objective: the same designs trial for trial, over 12 generations (with pruned
    trials and a categorical, an int and a float parameter)."""
    def objective(trial):
        x = trial.suggest_float("x", 0, 1)
        c = trial.suggest_categorical("c", [1, 2, 3, 4])
        z = trial.suggest_int("z", 0, 10)
        if z == 3:
            raise optuna.TrialPruned()
        return x * c + z, (1 - x) ** 2 + z * 0.1 / c

    def params(sampler):
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
        study.optimize(objective, n_trials=240)
        return [t.params for t in study.trials]
    assert params(LinearNSGAII(seed=5, population_size=20)) == \
        params(optuna.samplers.NSGAIISampler(seed=5, population_size=20))


def test_the_tally_read_bit_by_bit_agrees_with_a_fresh_read(tmp_path):
    store = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j")))
    study = optuna.create_study(storage=store, directions=["maximize", "minimize"], study_name="s")
    tally = StudyTally(study)
    lease = store.create_new_trial(study._study_id, optuna.trial.create_trial(
        state=optuna.trial.TrialState.RUNNING, user_attrs={"dfvg_lease": 5, "dfvg_lease_holder": "elsewhere:1"}))
    for i in range(7):
        study.add_trial(optuna.trial.create_trial(values=[i, i], user_attrs={"dfvg_lease_of": 0 if i < 3 else None}))
        if i == 2:
            assert tally.ledger() == ledger(study)
    assert tally.ledger() == ledger(study) and tally.ledger().outstanding == {0: 2}
    store.set_trial_state_values(lease, optuna.trial.TrialState.FAIL)
    assert tally.ledger() == ledger(study) and tally.ledger().complete == 7 and tally.ledger().outstanding == {}
    assert len(tally.take()) == 7 and tally.take() == []


def test_the_default_search_is_exact_and_says_so(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["search", "--results-dir", str(tmp_path), "--run-id", "d", "--trials", "900"])
    assert result.exit_code == 0, result.output
    assert "method: exact, all 34,560 grid points evaluated" in result.stdout
    assert "--trials 900 not used" in result.stderr
    run = tmp_path / "d"
    summary = json.loads((run / "manifest.json").read_text())["summary"]
    trials = pd.read_csv(run / "trials.csv")
    assert summary["method"] == "exact" and summary["hypervolume_fraction"] == pytest.approx(1.0, abs=1e-12)
    assert len(trials) == summary["pareto_size"] == summary["trials"] and trials["feasible"].all()
    exported = runner.invoke(cli, ["export", str(run), "--pick", "all", "--format", "json", "--json"])
    assert exported.exit_code == 0, exported.output
    again = runner.invoke(cli, ["search", "--results-dir", str(tmp_path), "--run-id", "d", "--resume",
                                "--method", "optuna"])
    assert again.exit_code == 2 and "was started with --method auto" in again.output


def test_an_exact_run_resumed_writes_only_what_is_missing(tmp_path, small_study):
    runner = CliRunner()
    args = ["search", "--study", str(small_study), "--results-dir", str(tmp_path), "--run-id", "e", "--json"]
    first = json.loads(runner.invoke(cli, args).stdout)
    again = runner.invoke(cli, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["trials"] == first["trials"]  # nothing written twice


def test_hypervolume_of_the_exact_front_is_what_the_grid_gives(small_space):
    plan = plan_search(small_space, "optuna", 100)
    frame = sweep_frame(small_space)
    feasible = frame[frame["feasible"]][["tokens_per_s_per_sequence", "j_per_token"]].to_numpy()
    reference = (0.0, plan.front.worst_cost * 1.1)
    assert hypervolume(plan.front.values, reference) == pytest.approx(hypervolume(feasible, reference), rel=1e-12)


def test_a_seeded_search_writes_the_sample_front_first_then_samples(tmp_path, small_study):
    runner = CliRunner()
    result = runner.invoke(cli, ["search", "--study", str(small_study), "--method", "seeded", "--trials", "40",
                                 "--results-dir", str(tmp_path), "--run-id", "s", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["method"] == "seeded" and summary["trials"] == 40
    assert "the whole grid's front" in summary["method_why"]  # a small grid: its exact front seeds the sampler
    trials = pd.read_csv(tmp_path / "s" / "trials.csv").sort_values("trial")
    seeds = int(summary["method_why"].split("(")[1].split()[0])
    first = trials.head(seeds)[["tokens_per_s_per_sequence", "j_per_token"]].to_numpy()
    assert first[:, 0].tolist() == sorted(first[:, 0], reverse=True)  # along the front, fastest first
    assert summary["hypervolume_fraction"] > 0.99


def test_an_exact_space_with_no_feasible_design_is_one_line_and_no_run(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["search", "--target", "llama-3.1-70b", "--draft", "llama-3.2-1b", "--acceptance",
                                 "0.7", "--results-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no feasible design among the space's" in lines[0] and "do not fit" in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_front_counts_why_points_fail(small_space):
    frame = sweep_frame(small_space)
    front = grid_front(small_space, grid_chunks(small_space, prepare(small_space).shapes, points=40))
    assert front.reasons == frame.loc[~frame["feasible"], "reason"].value_counts().to_dict()


def test_a_scan_of_the_whole_grid_tells_how_far_it_is(small_space):
    heard = []
    plan = plan_search(small_space, "exact", 10, on_points=lambda done, total: heard.append((done, total)))
    assert heard and heard[-1] == (plan.grid_points, plan.grid_points)
    assert [d for d, _ in heard] == sorted(d for d, _ in heard)
    with pytest.raises(InputError, match="use --method optuna$"):
        plan_search(dataclasses.replace(small_space, families=("adapt",)), "exact", 10)
