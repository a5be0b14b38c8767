"""$/Mtoken as the search's second objective (issue 17): the grid's values, feasibility, fronts,
picks, run files, resume and exports (docs/search.md, "Objectives")."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from dfvg_dse.pipeline import estimate
from dfvg_dse.pipeline.grid import (SCHEDULE_CHOICES, build_grid, build_shapes, evaluate_points, grid_chunks,
                                    grid_front, point_config)
from dfvg_dse.pipeline.pareto import pareto_mask
from dfvg_dse.report.tables import pareto_info
from dfvg_dse.search import evaluate_point, prepare, run_search, sweep_frame, trials_frame
from dfvg_dse.specs import InputError
from dfvg_dse.specs.objectives import parse_objectives

PRICED_FPGA_USD_PER_H = 1.5  # a price given to the V80 in these tests (no cloud rents one)


def _priced(space, usd_per_h=PRICED_FPGA_USD_PER_H):
    """The space with its V80 given a price per hour, minimising $/Mtoken."""
    drafts = tuple(dataclasses.replace(d, price_usd_per_s=usd_per_h / 3600) if d.name == "v80" else d
                   for d in space.draft_devices)
    return dataclasses.replace(space, draft_devices=drafts, cost="usd_per_mtoken")


def test_objectives_are_parsed_and_a_bad_one_is_one_line():
    assert parse_objectives("tokens_per_s,usd_per_mtoken") == "usd_per_mtoken"
    assert parse_objectives("tokens_per_s_per_sequence, j_per_token") == "j_per_token"
    for bad in ("usd_per_mtoken", "usd_per_mtoken,tokens_per_s", "tokens_per_s,watts", "a,b,c"):
        with pytest.raises(InputError, match="allowed: tokens_per_s,j_per_token, tokens_per_s,usd_per_mtoken"):
            parse_objectives(bad)


def test_grid_usd_per_mtoken_is_the_devices_price_over_the_aggregate_rate(small_space):
    """Independently: (price of each device used, per second) / (batch tokens per second) x 1e6, and
    the same number as `estimate` gives for the point."""
    space = _priced(small_space)
    shapes, _ = build_shapes(space)
    grid = build_grid(space, shapes)
    drafts = [d for d, _, _ in grid.drafts]
    ev = evaluate_points(space, shapes, drafts, grid.shape_idx, grid.draft_idx, grid.verify_idx,
                         grid.schedule_idx, grid.batch)
    gpu_usd_per_h = space.verify_devices[0].price_usd_per_s * 3600
    assert gpu_usd_per_h == pytest.approx(0.74)  # RunPod's RTX 4090 (hwdb/gpu/rtx-4090.toml)
    checked = 0
    for i in np.random.default_rng(2).choice(len(grid.shape_idx), 40, replace=False):
        drafter, verifier = drafts[grid.draft_idx[i]], space.verify_devices[grid.verify_idx[i]]
        usd_per_h = gpu_usd_per_h + (PRICED_FPGA_USD_PER_H if drafter.name != verifier.name else 0.0)
        if not ev.feasible[i]:
            continue
        assert ev.usd_per_mtoken[i] == pytest.approx(usd_per_h / 3600 / ev.tokens_per_s[i] * 1e6, rel=1e-12)
        config = point_config(space, shapes[grid.shape_idx[i]], drafter, verifier,
                              SCHEDULE_CHOICES[grid.schedule_idx[i]], int(grid.batch[i]))
        assert ev.usd_per_mtoken[i] == pytest.approx(estimate(config).energy.usd_per_mtoken, rel=1e-9)
        checked += 1
    assert checked > 10


def test_unpriced_devices_are_infeasible_only_when_dollars_are_the_objective(small_space):
    energy = sweep_frame(small_space)  # the V80 has no price: its designs have no $/Mtoken
    on_fpga = energy["draft_device"] == "v80"
    assert energy.loc[on_fpga, "usd_per_mtoken"].isna().all()
    assert energy.loc[~on_fpga & energy["feasible"], "usd_per_mtoken"].gt(0).all()
    dollars = sweep_frame(dataclasses.replace(small_space, cost="usd_per_mtoken"))
    assert not dollars.loc[on_fpga, "feasible"].any()
    assert dollars.loc[on_fpga, "reason"].str.contains("no price per hour for 'v80'").any()
    # the GPU-only designs are as feasible as before
    assert (dollars.loc[~on_fpga, "feasible"] == energy.loc[~on_fpga, "feasible"]).all()


def test_a_sampled_unpriced_design_reports_the_infeasible_values_not_nan(small_space):
    space = dataclasses.replace(small_space, cost="usd_per_mtoken")
    point = {"family": "chain", "depth": 4, "width": 1, "budget": 0, "batch": 1, "draft_device": "v80",
             "verify_device": "rtx-4090", "schedule": "overlap", "fpga_pe_fraction": 1.0, "fpga_clock_mhz": 300.0}
    record = evaluate_point(space, point)
    assert not record["feasible"] and "no price per hour" in record["reason"] and record["usd_per_mtoken"] is None
    assert record["constraints"][2] > 0  # Optuna sees it as infeasible too
    adapt = evaluate_point(dataclasses.replace(space, families=("adapt",), adapt_rounds=50),
                           {**point, "family": "adapt", "width": 2, "budget": 8, "threshold": 0.1,
                            "window_ratio": 1.0, "temperature": 0.0})
    assert not adapt["feasible"] and "no price per hour" in adapt["reason"]
    assert adapt["tokens_per_s"] > 0 and adapt["usd_per_mtoken"] is None  # evaluated; only the price is missing


def test_the_dollar_front_is_the_brute_force_front_and_its_picks_are_its_ends(small_space):
    space = _priced(small_space)
    frame = sweep_frame(space)
    feasible = frame[frame["feasible"]][["tokens_per_s_per_sequence", "usd_per_mtoken"]].to_numpy()
    brute = feasible[pareto_mask(feasible)]
    front = grid_front(space, grid_chunks(space, prepare(space).shapes, points=50))
    assert sorted(map(tuple, front.values)) == sorted(map(tuple, brute))
    assert front.worst_cost == feasible[:, 1].max()
    info = pareto_info(frame, "usd_per_mtoken")
    assert set(info.picks) == {"max-throughput", "min-cost", "knee"}
    cheapest = frame.loc[frame["feasible"], "usd_per_mtoken"].min()
    assert frame.iloc[info.picks["min-cost"]]["usd_per_mtoken"] == cheapest
    # by dollars the FPGA drafter pays only where its speed is worth its price: the cheapest design batches
    assert frame.iloc[info.picks["min-cost"]]["batch"] == max(space.batches)


def test_a_dollar_search_finds_the_exact_front(small_space, tmp_path):
    space = _priced(small_space)
    study = run_search(space, f"sqlite:///{tmp_path / 'u.db'}", "u", 150, seed=1)
    trials = trials_frame(study)
    assert trials.loc[trials["feasible"], "usd_per_mtoken"].notna().all()
    values = np.array([t.values for t in study.trials if t.values is not None])
    assert np.isfinite(values).all()  # an unpriced design reports INFEASIBLE_VALUES, never nan
    assert not trials.loc[trials["feasible"], "reason"].astype(str).str.len().any()


def test_search_cli_with_dollars_writes_min_cost_and_exports_it(run, tmp_path, small_study, hwdb_copy):
    entry = hwdb_copy / "fpga" / "v80.toml"
    price = 'price_per_hour = { value = 1.5, unit = "USD/h", tag = "unverified", source = "a test price" }\n'
    entry.write_text(entry.read_text().replace("[[memory]]", price + "[[memory]]", 1))
    base = ["--hwdb-dir", str(hwdb_copy)]
    args = [*base, "search", "--study", str(small_study), "--results-dir", str(tmp_path), "--run-id", "u",
            "--objectives", "tokens_per_s,usd_per_mtoken"]
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert "min-cost" in result.stdout and "/Mtoken" in result.stdout and "min-energy" not in result.stdout
    folder = tmp_path / "u"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["space"]["cost"] == "usd_per_mtoken" and manifest["request"]["cost"] == "usd_per_mtoken"
    assert manifest["summary"]["hypervolume_fraction"] == pytest.approx(1.0, abs=1e-12)  # the exact front
    recommended = json.loads((folder / "recommended.json").read_text())
    trials = pd.read_csv(folder / "trials.csv")
    assert recommended["min-cost"]["expected"]["usd_per_mtoken"] == pytest.approx(
        trials.loc[trials["feasible"], "usd_per_mtoken"].min())
    exported = run(*base, "export", str(folder), "--pick", "min-cost", "--format", "vllm", "--json")
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.stdout)["realised"]["usd_per_mtoken"] > 0
    wrong = run(*base, "export", str(folder), "--pick", "min-energy")
    assert wrong.exit_code == 2 and "the run minimised usd_per_mtoken" in wrong.output
    redraw = run(*base, "pareto", str(folder), "--json")
    assert redraw.exit_code == 0 and "min-cost" in json.loads(redraw.stdout)["picks"]
    other = run(*args[:-2], "--resume", "--objectives", "tokens_per_s,j_per_token")
    assert other.exit_code == 2 and "differ from those run 'u' started with" in other.output
    again = run(*base, "search", "--results-dir", str(tmp_path), "--run-id", "u", "--resume")
    assert again.exit_code == 0, again.output  # the saved request keeps the objective


def test_cli_warns_of_unpriced_devices_and_refuses_a_space_with_no_priced_design(run, tmp_path):
    common = ["--results-dir", str(tmp_path), "--objectives", "tokens_per_s,usd_per_mtoken"]
    warned = run("sweep", *common, "--run-id", "w", "--verify-device", "rtx-4090", "--draft-device", "v80",
                 "--draft-device", "rtx-4090")
    assert warned.exit_code == 0, warned.output
    assert "no price per hour for v80" in warned.stderr and "infeasible" in warned.stderr
    refused = run("sweep", *common, "--run-id", "r", "--verify-device", "rtx-4090", "--draft-device", "v80")
    assert refused.exit_code == 2 and refused.output.count("\n") == 1
    assert "no design of the space is priced" in refused.output and "--draft-device" in refused.output
    assert not (tmp_path / "r").exists()  # refused before any folder is made
    bad = run("search", "--results-dir", str(tmp_path), "--objectives", "tokens_per_s,watts")
    assert bad.exit_code == 2 and "allowed: tokens_per_s,j_per_token" in bad.output
