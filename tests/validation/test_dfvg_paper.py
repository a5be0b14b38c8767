"""DFVG's own published figures in `validate --anchors` (validation/dfvg_paper.py): which figures,
and a design that no longer fits is reported as such, never as a number."""

import dataclasses

import click
import pytest

from dfvg_dse.cli import cli
from dfvg_dse.cli.pipeline import preset_setup
from dfvg_dse.pipeline.presets import PRESETS
from dfvg_dse.pipeline.scenarios import scenario
from dfvg_dse.validation.dfvg_paper import dfvg_paper_report, preset_checks

PRESET = PRESETS["dfvg-paper"]


def _setup(target="qwen3-8b", draft="qwen3-0.6b"):
    ctx = click.Context(cli, obj={"models_dir": None, "hwdb_dir": None, "engine": "trtllm"})
    return preset_setup(ctx, PRESET, target, draft)


def test_the_paper_point_figures_are_checked_once_each():
    checks = preset_checks(PRESET["paper"])
    # the headline pairs (Vicuna-7B 2.44x and Qwen3-8B 3.26x: the abstract's range ends) and the ablation's
    # first three steps on Qwen3-8B; its last step, + overlap, is the full design (the headline's 3.26x)
    assert checks == [("vicuna-7b", "dfvg", 2.44), ("qwen3-8b", "dfvg", 3.26), ("qwen3-8b", "hw-branch", 2.21),
                      ("qwen3-8b", "+treesort", 2.46), ("qwen3-8b", "+multicore", 3.08)]


def test_a_figure_is_the_scenarios_speedup_over_ar_on_the_same_gpu():
    setup = _setup()
    paper = {**PRESET["paper"], "speedup": {"qwen3-8b": 3.26}, "ablation": {"+overlap": 3.26}}
    [record] = dfvg_paper_report({"qwen3-8b": setup}, paper, 1000)
    ar = scenario(setup, "ar", None, 1000)
    dfvg = scenario(setup, "dfvg", None, 1000)
    assert record["predicted_speedup"] == pytest.approx(dfvg.tokens_per_s / ar.tokens_per_s)
    assert record["error"] == pytest.approx(record["predicted_speedup"] / 3.26 - 1)
    assert record["first_rank_acceptance"] == 0.8  # the paper's token-level acceptance, midpoint of 75-85%


def test_a_design_that_does_not_fit_is_reported_without_a_number():
    setup = _setup()
    tier = dataclasses.replace(setup.gpu.memory[0], capacity_bytes=1e9)
    small = dataclasses.replace(setup, gpu=dataclasses.replace(setup.gpu, memory=(tier,) + setup.gpu.memory[1:]))
    paper = {**PRESET["paper"], "speedup": {"qwen3-8b": 3.26}, "ablation": {}}
    [record] = dfvg_paper_report({"qwen3-8b": small}, paper, 1000)
    assert record["predicted_speedup"] is None and record["error"] is None and record["infeasible"]
