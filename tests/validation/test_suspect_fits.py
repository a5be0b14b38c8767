"""Fits that end on a bound of their range, or explain little, say so (issue 12, item 3): the fit
functions name the parameter, its value and the bound; a suspect pipe is measured once more;
validate does not pass on a suspect fit; calibrate and validate report it in text, --json and
their files. The stage processes and the pipe are replaced by synthetic measurements here: no
decoding, no timing asserted."""

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli
from dfvg_dse.costs.processor import processor_forward_cost
from dfvg_dse.costs.stages import tree_draft_time_s, tree_verify_cost
from dfvg_dse.reference.stages import RunResult
from dfvg_dse.specs import ModelSpec
from dfvg_dse.specs.decoding import TreeSpec
from dfvg_dse.validation import run
from dfvg_dse.validation.calibrate import (RMS_SUSPECT, RMS_WARNING, FitIssue, core_device, fit_core, fit_link,
                                           rms_issues)
from dfvg_dse.validation.compare import summary

TARGET = ModelSpec(name="t", family="llama", n_layers=4, d_model=256, n_heads=4, n_kv_heads=4, head_dim=64, d_ffn=688,
                   vocab_size=256, max_positions=1024, tied_embeddings=True, weight_dtype="float32",
                   kv_dtype="float32")
PEAK = 166e9
TRUE = {"eta_compute": 0.3, "bandwidth_bytes_per_s": 2.5e10, "forward_overhead_s": 6e-5, "layer_overhead_s": 4e-5,
        "multi_row_bandwidth_fraction": 0.55, "compute_memory_overlap": 0.2}
SHAPES = [(n, c) for n in (1, 2, 3, 4, 6, 8, 12, 16, 32, 64) for c in (32, 256)]
HEALTHY_PIPE = [{"bytes": b, "seconds": 8e-6 + b / 6e9, "count": 200} for b in run.PIPE_SIZES]
# a loaded machine's pipe: the small messages waited for a core, so time fell as messages grew
GARBAGE_PIPE = [{"bytes": b, "seconds": s, "count": 200} for b, s in zip(run.PIPE_SIZES, (9e-4, 3e-4, 2e-5, 1.9e-5))]


def _records(device, shapes=SHAPES, noise=None):
    """Autoregressive steps (1 token) and tree verifications (more tokens, and the round's fixed work)."""
    times = [float(tree_verify_cost(TARGET, device, n - 1, None, c).time_s if n > 1 else
                   processor_forward_cost(TARGET, device, n, c).time_s) for n, c in shapes]
    if noise is not None:
        times = [t * f for t, f in zip(times, noise)]
    return [{"model": "target", "tokens": n, "context": c, "seconds": t} for (n, c), t in zip(shapes, times)]


def _named(issues, parameter):
    return [i for i in issues if i.parameter == parameter]


# -- the fit functions ------------------------------------------------------------------------
def test_a_healthy_core_fit_has_no_issues():
    truth = core_device("truth", PEAK, {**TRUE, "verify_round_overhead_s": 8e-5}, "t")
    fit = fit_core(_records(truth), TARGET, PEAK, "local-core-0", "t")
    assert fit.issues == ()
    assert fit.device.verify_round_overhead_s == pytest.approx(8e-5, rel=0.1)


def test_a_core_whose_optimum_lies_outside_the_bounds_names_each_bound():
    # multi-row products at 1% of the one-row bandwidth (the range stops at 5%), no fixed cost at all
    outside = {**TRUE, "multi_row_bandwidth_fraction": 0.01, "forward_overhead_s": 0.0, "layer_overhead_s": 0.0,
               "compute_memory_overlap": 0.0}
    fit = fit_core(_records(core_device("truth", PEAK, outside, "t")), TARGET, PEAK, "local-core-0", "t")
    (multi_row,) = _named(fit.issues, "multi_row_bandwidth_fraction")
    assert multi_row.bound == 0.05 and multi_row.value == pytest.approx(0.05) and multi_row.severity == "warning"
    assert fit.device.multi_row_bandwidth_fraction == pytest.approx(0.05)  # held at the bound
    assert multi_row.message.startswith("local-core-0 (verify core): multi_row_bandwidth_fraction = 0.05 at its "
                                        "lower bound 0.05")
    (overhead,) = _named(fit.issues, "forward_overhead_s + n_layers x layer_overhead_s")
    assert overhead.bound == 0.0 and "no fixed cost" in overhead.message
    # overlap at either end (compute and memory add, or the roofline's max) is a value of the term
    assert not _named(fit.issues, "compute_memory_overlap")
    # the model cannot follow such times: the fit's error says so too
    assert [i.severity for i in _named(fit.issues, "rms_relative_error")] in (["warning"], ["suspect"])


def test_a_noisy_core_fit_with_a_huge_rms_error_is_suspect():
    noise = np.random.default_rng(3).lognormal(0.0, 1.5, len(SHAPES))
    fit = fit_core(_records(core_device("truth", PEAK, TRUE, "t"), noise=noise), TARGET, PEAK, "local-core-0", "t")
    assert fit.rms_relative_error > RMS_SUSPECT
    (rms,) = _named(fit.issues, "rms_relative_error")
    assert rms.suspect and rms.bound == RMS_SUSPECT and rms.value == fit.rms_relative_error
    assert "rms relative error" in rms.message and f"above {RMS_SUSPECT:.0%}" in rms.message


def test_rms_thresholds():
    assert rms_issues("x", 0.05) == []
    assert [i.severity for i in rms_issues("x", (RMS_WARNING + RMS_SUSPECT) / 2)] == ["warning"]
    assert [i.severity for i in rms_issues("x", 138.73)] == ["suspect"]
    assert [i.severity for i in rms_issues("x", float("nan"))] == ["suspect"]


def test_a_healthy_pipe_fit_has_no_issues():
    fit = fit_link(HEALTHY_PIPE, "local-pipe", "t")
    assert fit.issues == () and fit.link.latency_s == pytest.approx(8e-6)


def test_a_pipe_whose_time_falls_with_size_is_suspect_at_the_bandwidth_bound():
    fit = fit_link(GARBAGE_PIPE, "local-pipe", "t")
    (bandwidth,) = _named(fit.issues, "bandwidth_bytes_per_s")
    assert bandwidth.suspect and bandwidth.bound == 1e12 and fit.link.bandwidth_bytes_per_s == 1e12
    assert "time fell as messages grew" in bandwidth.message
    (rms,) = _named(fit.issues, "rms_relative_error")  # and the line explains nothing
    assert rms.suspect


def test_a_pipe_line_with_a_negative_intercept_is_suspect_at_latency_zero():
    records = [{"bytes": b, "seconds": s} for b, s in zip(run.PIPE_SIZES, (1e-6, 1e-6, 1e-6, 1e-4))]
    fit = fit_link(records, "local-pipe", "t")
    (latency,) = _named(fit.issues, "latency_s")
    assert latency.suspect and latency.bound == 0.0 and fit.link.latency_s == 0.0
    assert latency.message.startswith("local-pipe: latency_s = 0 at its lower bound 0 (the straight line")


def test_a_message_overhead_at_zero_is_suspect():
    record = {"draft_start_s": 0.0, "draft_end_s": 1e-4, "verify_start_s": 1.2e-4, "verify_end_s": 5e-4}
    runs = {spec: [RunResult([1, 2], 1e-3, trace=[record, {k: v + 1e-3 for k, v in record.items()}])]
            for spec in run.CALIBRATION_TREES}
    slow_pipe = fit_link([{"bytes": b, "seconds": 9e-4 + b / 6e9} for b in run.PIPE_SIZES], "local-pipe", "t")
    (overhead,) = run.with_messages(slow_pipe, runs).issues  # gaps of 20-600 us, a 900 us pipe
    assert overhead.suspect and overhead.parameter == "software_overhead_s" and overhead.bound == 0.0
    assert run.with_messages(fit_link(HEALTHY_PIPE, "local-pipe", "t"), runs).issues == ()


# -- the rule ---------------------------------------------------------------------------------
ROW = {"config": "chain:2 sequential", "error_tokens_per_round": 0.0, "error_tokens_per_s": 0.01}
SUSPECT = FitIssue("local-pipe", "latency_s", 0.0, 0.0, "suspect", "local-pipe: latency_s = 0 at its lower bound 0")
WARNING = FitIssue("local-core-1 (draft core)", "eta_compute", 1.0, 1.0, "warning", "local-core-1: eta_compute = 1")


def test_a_suspect_fit_fails_a_validation_within_budget_and_a_warning_does_not():
    assert summary([ROW])["passed"]
    failed = summary([ROW], [SUSPECT, WARNING])
    assert failed["within_budget"] and not failed["passed"] and failed["calibration_suspect"]
    assert failed["suspect"] == [SUSPECT.message] and failed["warnings"] == [SUSPECT.message, WARNING.message]
    warned = summary([ROW], [WARNING])
    assert warned["passed"] and warned["warnings"] == [WARNING.message] and warned["suspect"] == []


def _pipes(*results):
    calls = []

    def pipe_times(sizes, count, spin=True):
        calls.append(count)
        return [dict(r) for r in results[min(len(calls), len(results)) - 1]]
    return pipe_times, calls


def test_a_suspect_pipe_is_measured_once_more(monkeypatch):
    fake, calls = _pipes(GARBAGE_PIPE, HEALTHY_PIPE)
    monkeypatch.setattr(run, "pipe_times", fake)
    assert run.measure_pipe(True, "t").issues == () and len(calls) == 2
    fake, calls = _pipes(HEALTHY_PIPE)
    monkeypatch.setattr(run, "pipe_times", fake)
    assert run.measure_pipe(True, "t").issues == () and len(calls) == 1  # a healthy pipe once
    fake, calls = _pipes(GARBAGE_PIPE, GARBAGE_PIPE)
    monkeypatch.setattr(run, "pipe_times", fake)
    again = run.measure_pipe(True, "t")
    assert len(calls) == 2 and any(i.suspect for i in again.issues)
    assert all(i.message.endswith("measured twice") for i in again.issues)


# -- synthetic stage processes ----------------------------------------------------------------
VERIFY_TRUTH = dict(TRUE, bandwidth_bytes_per_s=1.2e10)
DRAFT_TRUTH = dict(TRUE, draft_round_overhead_s=1e-4)
GAP_S = 5e-5  # between the stages: above the pipe's 8 us, so a per-message overhead is measured
# the linear layers' time per row count on each core (uneven, as OpenBLAS's kernels make it)
ROW_RATIOS = {"target": (1.0, 1.8, 2.56, 1.94, 2.4, 2.57, 3.03, 2.45),
              "draft": (1.0, 2.59, 3.48, 2.3, 3.46, 3.55, 4.57, 3.35)}


class FakeRuntime:
    """TwoStageRuntime's interface; stage times from known devices, acceptance from a seeded coin."""

    pinned = True

    def __init__(self, target, draft=None, *args, **kwargs):
        self.target, self.draft = target.config.spec, draft.config.spec
        self.verify = core_device("truth-0", PEAK, VERIFY_TRUTH, "t", ROW_RATIOS["target"])
        self.drafter = core_device("truth-1", PEAK, DRAFT_TRUTH, "t", ROW_RATIOS["draft"])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def run(self, job):
        context = len(job.prompt)
        if job.rule is None:
            steps = [float(processor_forward_cost(self.target, self.verify, 1, context + i).time_s)
                     for i in range(job.max_new_tokens - 1)]
            return RunResult(list(range(job.max_new_tokens)), 1e-3 + sum(steps), 1e-3, step_s=steps)
        parents, ranks = job.rule
        tree = TreeSpec(tuple(parents), tuple(ranks))
        rng = np.random.default_rng(job.seed + 7 * context)
        extra = 3e-5 if job.sampling.temperature else 0.0  # sampling costs a little more per level
        clock, tokens, trace, counts = 0.0, 1, [], [0] * len(parents)
        while tokens < job.max_new_tokens:
            path = [0]
            while True:
                child = next((i for i in range(1, len(parents)) if parents[i] == path[-1] and ranks[i] == 0), None)
                if child is None or rng.random() > 0.6:
                    break
                path.append(child)
            drafting = float(tree_draft_time_s(self.draft, self.drafter, tree.level_widths(), context)[0]) \
                + extra * len(tree.level_widths())
            verifying = float(processor_forward_cost(self.target, self.verify, len(parents), context).time_s) + extra
            record = {"round": len(trace), "parents": list(parents), "ranks": list(ranks),
                      "confidences": [1.0] + rng.uniform(0.3, 0.95, len(parents) - 1).tolist(), "accepted": path,
                      "draft_start_s": clock, "draft_end_s": clock + drafting,
                      "verify_start_s": clock + drafting + GAP_S, "verify_end_s": clock + drafting + GAP_S + verifying,
                      "link_bytes": 16 * (len(parents) - 1 + len(path))}
            trace.append(record)
            clock = record["verify_end_s"] + GAP_S
            counts[len(path) - 1] += 1
            tokens += len(path)
            context += len(path)
        return RunResult(list(range(job.max_new_tokens)), clock, 0.0, accept_counts=counts,
                         trace=trace if job.trace else [], link_bytes=sum(r["link_bytes"] for r in trace))


@pytest.fixture
def synthetic(monkeypatch):
    """Stage processes and teacher-forced traces replaced; the pipe measured by `pipes`."""
    monkeypatch.setattr(run, "TwoStageRuntime", FakeRuntime)
    monkeypatch.setattr(run, "measure_row_ratios", lambda target, draft, quick: ROW_RATIOS)
    monkeypatch.setattr(run, "with_traces", lambda target, draft, prompts, greedy, sampled, seed, source:
                        (greedy, sampled))

    def pipes(*results):
        fake, calls = _pipes(*results)
        monkeypatch.setattr(run, "pipe_times", fake)
        return calls
    return pipes


class _Pair:
    def __init__(self, spec):
        self.config = type("Config", (), {"spec": spec})()


@pytest.mark.slow  # the real least-squares fits, about 15 s
def test_progress_is_called_once_per_step(synthetic):
    synthetic(HEALTHY_PIPE)
    draft = dataclasses.replace(TARGET, name="d", n_layers=1, d_model=128, n_heads=2, n_kv_heads=2, d_ffn=344)
    pair, specs = (_Pair(TARGET), _Pair(draft)), {"target": TARGET, "draft": draft}
    prompts = [tuple(range(1, 20)), tuple(range(5, 30))]
    seen = []
    result = run.calibrate(*pair, specs, prompts, True, "now", lambda *call: seen.append(call))
    total = run.calibration_steps(len(prompts))
    assert total == 1 + len(prompts) * 6 + 3
    assert [s[:2] for s in seen] == [(i, total) for i in range(1, total + 1)]
    assert seen[1][2] == "prompt 1/2 ar" and all(isinstance(s[2], str) and s[2] for s in seen)
    assert not any(i.suspect for i in result.issues)
    # the measured row ratios reach both fitted cores, and with them the fit finds the true bandwidth
    assert result.target_fit.device.linear_row_ratios == ROW_RATIOS["target"]
    assert result.draft_fit.device.linear_row_ratios == ROW_RATIOS["draft"]
    assert result.target_fit.device.main_memory.bandwidth_bytes_per_s == pytest.approx(1.2e10, rel=0.05)
    seen.clear()
    profile = result.greedy_profile
    parts = run.Parts(TARGET, draft, result.target_fit.device, result.draft_fit.device, result.link.link, profile,
                      result.sampled_profile, 150)
    cases = run.Case("ar"), run.Case("chain:2", "overlap")
    run.validate(*pair, parts, list(cases), prompts, result, "now", lambda *call: seen.append(call))
    total = run.validation_steps(len(prompts), len(cases))
    assert total == 1 + len(prompts) * (6 + 2) + 1
    assert [s[:2] for s in seen] == [(i, total) for i in range(1, total + 1)]


# -- the commands -----------------------------------------------------------------------------
@pytest.mark.slow
def test_validate_on_a_garbage_pipe_fails_naming_the_parameter_value_and_bound(synthetic, tmp_path):
    calls = synthetic(GARBAGE_PIPE)  # garbage on the first and on the second measurement
    result = CliRunner().invoke(cli, ["validate", "--quick", "--count", "2", "--out", str(tmp_path), "--json"])
    assert len(calls) == 2  # measured once more before it was called suspect
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)  # one JSON document, no progress on a non-terminal
    assert not document["passed"] and document["calibration_suspect"]
    line = "local-pipe: bandwidth_bytes_per_s = 1e+12 at its upper bound 1e+12"
    assert any(s.startswith(line) for s in document["suspect"]) and any(line in w for w in document["warnings"])
    assert any(i["parameter"] == "bandwidth_bytes_per_s" and i["severity"] == "suspect" for i in document["issues"])
    assert result.stderr == ""
    # and every report file says so
    assert "**suspect**: " + line in (tmp_path / "validation.md").read_text()
    written = json.loads((tmp_path / "calibration" / "calibration.json").read_text())
    assert written["suspect"] and any(w.startswith(line) for w in written["warnings"])
    assert "SUSPECT: " + line in (tmp_path / "calibration" / "hwdb" / "link" / "local-pipe.toml").read_text()
    # text mode: one line per suspect fit, and the verdict says why it failed
    text = CliRunner().invoke(cli, ["validate", "--quick", "--count", "2", "--out", str(tmp_path)])
    assert text.exit_code == 1
    assert any(s.startswith("suspect: " + line) for s in text.stderr.splitlines())
    assert "FAILED (calibration suspect: " in text.stdout


@pytest.mark.slow
def test_calibrate_reports_bound_hits_and_exits_1_when_suspect(synthetic, tmp_path):
    synthetic(HEALTHY_PIPE)
    healthy = CliRunner().invoke(cli, ["calibrate", "--count", "2", "--out", str(tmp_path), "--json"])
    assert healthy.exit_code == 0, healthy.output
    document = json.loads(healthy.stdout)
    assert document["suspect"] == [] and isinstance(document["warnings"], list)
    assert document["verify_core"]["draft_round_overhead_us"] is None  # not fitted for the verify core
    assert document["draft_core"]["verify_round_overhead_us"] is None  # nor this one for the draft core
    assert document["verify_core"]["verify_round_overhead_us"] >= 0
    synthetic(GARBAGE_PIPE)
    garbage = CliRunner().invoke(cli, ["calibrate", "--count", "2", "--out", str(tmp_path), "--json"])
    assert garbage.exit_code == 1
    document = json.loads(garbage.stdout)
    assert any("local-pipe: bandwidth_bytes_per_s = 1e+12 at its upper bound 1e+12" in s for s in document["suspect"])
    text = CliRunner().invoke(cli, ["calibrate", "--count", "2", "--out", str(tmp_path)])
    assert text.exit_code == 1 and "suspect: local-pipe: bandwidth_bytes_per_s" in text.stderr
    assert text.stderr.strip().splitlines()[-1].startswith("calibration suspect")
