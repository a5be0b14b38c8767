"""Calibration and validation runs on this machine (issue 7): real decoding in the stage processes,
then the fits (calibrate.py) and the comparison (compare.py).

Calibration decodes with its own configurations — autoregressive (every step timed), chain:1,
chain:3, chain:6 and kary:3x2 greedy, chain:6 sampled — whose stage times fit each core and whose traces fit
the acceptance profiles. Validation decodes other configurations on other prompts. This machine's
speed drifts by tens of percent over minutes, so validation repeats the calibration runs on each
of its prompts, interleaved with the compared runs, and predicts from that in-window fit; the
prediction from the earlier calibration (the other prompt half) is reported beside it.

Every fit is checked (calibrate.FitIssue). The pipe is the one measurement cheap enough to repeat
(about a second): a suspect pipe fit is measured once more before it is reported. Both long
functions take `progress(done, total, step)`, called before each step (done counts from 1)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dfvg_dse.acceptance import expected_tokens
from dfvg_dse.acceptance.bursty import fit_bursty, simulate_rounds
from dfvg_dse.costs.processor import processor_forward_cost
from dfvg_dse.costs.stages import tree_draft_time_s
from dfvg_dse.reference import Model, Sampling
from dfvg_dse.reference.microbench import core_peak_flops_per_s, linear_row_times, pipe_times
from dfvg_dse.reference.teacher import teacher_forced_acceptance
from dfvg_dse.reference.stages import Job, RunResult, TwoStageRuntime, stage_cpus
from dfvg_dse.specs import AcceptanceProfile, AcceptanceTrace, DeviceSpec, ModelSpec
from dfvg_dse.specs.decoding import TreeSpec
from dfvg_dse.tree import parse_tree_spec
from dfvg_dse.validation.calibrate import (CoreFit, FitIssue, LinkFit, acceptance_issues, fit_acceptance, fit_core,
                                           fit_link, floored_at_zero, message_seconds, stage_records)
from dfvg_dse.validation.compare import (SAMPLED_TEMPERATURE, Case, Parts, compare, drafting_rule, predict,
                                         summarise_runs)

NEW_TOKENS = 128
CALIBRATION_TREES = ("chain:1", "chain:3", "chain:6", "kary:3x2")  # verify 2, 4, 7, 13 tokens; depth, ranks
SAMPLED_TREE = "chain:6"  # sampled calibration: never a validated configuration
TRACE_EXTRA_TOKENS = 16  # teacher-forced text past a run's end: a last round may accept that far
PIPE_SIZES = (16, 256, 4096, 65536)
Progress = Callable[[int, int, str], None]  # (step number from 1, steps in all, what runs now)


class _Steps:
    """Numbered steps reported to a progress callback (or to nobody)."""

    def __init__(self, progress: Progress | None, total: int):
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, step: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, step)


@dataclass(frozen=True)
class Calibration:
    target_fit: CoreFit  # the verify core
    draft_fit: CoreFit  # the draft core, with the reference drafter's own per-level work
    link: LinkFit  # the pipe, with the per-message overhead of the calibration runs
    greedy_profile: AcceptanceProfile
    sampled_profile: AcceptanceProfile
    peak_flops_per_s: float
    clock_hz: float
    peak_source: str
    sampled_extra_s: tuple[float, float] = (0.0, 0.0)  # per drafting level, per verified token
    extra_issues: tuple[FitIssue, ...] = ()  # sampling's extra work, the acceptance fits
    # the draft core's peak and its derivation when its backend's dtype differs (0, "": the target core's)
    draft_peak_flops_per_s: float = 0.0
    draft_peak_source: str = ""
    setup: str = ""  # what was decoded, on which engines (reports name it)

    @property
    def issues(self) -> tuple[FitIssue, ...]:
        return self.target_fit.issues + self.draft_fit.issues + self.link.issues + self.extra_issues

    @property
    def peaks(self) -> tuple[float, float]:
        """(verify core's, draft core's) peak FLOP/s, each for its own backend's dtype."""
        return self.peak_flops_per_s, self.draft_peak_flops_per_s or self.peak_flops_per_s

    @property
    def peak_sources(self) -> tuple[str, str]:
        return self.peak_source, self.draft_peak_source or self.peak_source


@dataclass(frozen=True)
class RunFits:
    """What one set of calibration runs fits: both cores, both profiles, sampling's extra work."""

    target_fit: CoreFit
    draft_fit: CoreFit
    greedy_profile: AcceptanceProfile
    sampled_profile: AcceptanceProfile
    sampled_extra_s: tuple[float, float]
    issues: tuple[FitIssue, ...]  # of sampling's extra work and the acceptance fits


@dataclass(frozen=True)
class Window:
    """The in-window fit validate predicts from (the calibration's pipe, this window's messages)."""

    target_fit: CoreFit
    draft_fit: CoreFit
    link: LinkFit
    extra_issues: tuple[FitIssue, ...] = ()

    @property
    def issues(self) -> tuple[FitIssue, ...]:
        """Named "in-window ..." apart from the calibration's fits of the same cores."""
        return tuple(dataclasses.replace(i, fit=f"in-window {i.fit}", message=f"in-window {i.message}")
                     for i in self.target_fit.issues + self.draft_fit.issues + self.link.issues + self.extra_issues)


def _rule(tree_spec: str):
    tree = parse_tree_spec(tree_spec)
    return tuple(tree.parents), tuple(tree.ranks)


def acceptance_trace(target: Model, draft: Model, prompts: list[tuple[int, ...]], temperature: float, seed: int,
                     source: str) -> AcceptanceTrace:
    """Teacher-forced acceptance along the target's own continuation of every prompt (greedy, or
    sampled at `temperature` with seeds seed, seed + 1, ...): what trace replay predicts from."""
    sampling = Sampling(temperature)
    runs = [teacher_forced_acceptance(target.fresh(), draft.fresh(), list(p), NEW_TOKENS + TRACE_EXTRA_TOKENS,
                                      sampling, seed + i) for i, p in enumerate(prompts)]
    name = "reference/greedy" if sampling.greedy else f"reference/T{temperature:g}"
    if sampling.greedy:
        return AcceptanceTrace(name, NEW_TOKENS, ranks=tuple(tuple(r["ranks"]) for r in runs), source=source,
                               top_probs=tuple(r["top_probs"] for r in runs))
    return AcceptanceTrace(name, NEW_TOKENS, accept_probs=tuple(tuple(r["accept_probs"]) for r in runs),
                           bonus_probs=tuple(tuple(r["bonus_probs"]) for r in runs), source=source)


def with_traces(target: Model, draft: Model, prompts: list[tuple[int, ...]], greedy: AcceptanceProfile,
                sampled: AcceptanceProfile, seed: int, source: str) -> tuple[AcceptanceProfile, AcceptanceProfile]:
    """Both profiles with their teacher-forced traces on `prompts` attached."""
    return (dataclasses.replace(greedy, trace=acceptance_trace(target, draft, prompts, 0.0, seed, source)),
            dataclasses.replace(sampled, trace=acceptance_trace(target, draft, prompts, SAMPLED_TEMPERATURE, seed,
                                                                source)))


def warm_up(runtime: TwoStageRuntime, prompt: tuple[int, ...]) -> None:
    """Untimed short runs of every calibration shape: a fresh stage process's first forwards are
    slow (page faults, BLAS buffers), and a short validation would fit them."""
    for job in calibration_jobs(prompt, 0).values():
        runtime.run(dataclasses.replace(job, max_new_tokens=24))


def calibration_jobs(prompt: tuple[int, ...], seed: int) -> dict[str, Job]:
    jobs = {"ar": Job(prompt, NEW_TOKENS)}
    jobs.update({spec: Job(prompt, NEW_TOKENS, _rule(spec), trace=True) for spec in CALIBRATION_TREES})
    jobs["sampled"] = Job(prompt, NEW_TOKENS, _rule(SAMPLED_TREE), Sampling(SAMPLED_TEMPERATURE), seed=seed,
                          trace=True)
    return jobs


def with_messages(pipe: LinkFit, runs: dict[str, list[RunResult]]) -> LinkFit:
    """The pipe plus the per-message software work measured in the calibration runs (suspect at 0:
    encoding, waking and decoding a message take time)."""
    greedy = [r for spec in CALIBRATION_TREES for r in runs[spec]]
    gap = message_seconds(greedy)
    overhead, issues = floored_at_zero(pipe.link.name, "software_overhead_s", gap - pipe.link.latency_s, "suspect",
                                       f"the mean gap between the stages, {gap * 1e6:.1f} us, less the pipe's "
                                       f"latency, {pipe.link.latency_s * 1e6:.1f} us, is")
    return dataclasses.replace(pipe, link=dataclasses.replace(pipe.link, software_overhead_s=overhead),
                               issues=pipe.issues + tuple(issues))


def measure_pipe(quick: bool, source: str) -> LinkFit:
    """The pipe's straight line; measured once more when the first fit is suspect (a loaded
    machine's moment), and reported as measured twice when the second is suspect too."""
    pipe = fit_link(pipe_times(PIPE_SIZES, 200 if quick else 1000), "local-pipe", source)
    if not any(issue.suspect for issue in pipe.issues):
        return pipe
    again = fit_link(pipe_times(PIPE_SIZES, 200 if quick else 1000), "local-pipe", source)
    return dataclasses.replace(again, issues=tuple(dataclasses.replace(i, message=f"{i.message}; measured twice")
                                                   for i in again.issues))


def sampled_extra_s(runs: list[RunResult], lengths: list[int], specs: dict[str, ModelSpec], draft: DeviceSpec,
                    verify: DeviceSpec) -> tuple[tuple[float, float], list[FitIssue]]:
    """Sampling's extra seconds per drafting level and per verified token: the mean measured time
    of sampled rounds less what the greedy-fitted cores predict for the same shapes (the residual
    walk visits the verified tokens, so its cost grows with the tree); a warning where that is 0."""
    records = stage_records(runs, lengths)
    extra_draft, extra_verify = [], []
    for record in records:
        if record["model"] == "draft":
            predicted = float(tree_draft_time_s(specs["draft"], draft, record["widths"], record["context"])[0])
            extra_draft += [(record["seconds"] - predicted) / len(record["widths"])] * record["count"]
        else:
            predicted = float(processor_forward_cost(specs["target"], verify, record["tokens"], record["context"]).time_s)
            extra_verify += [(record["seconds"] - predicted) / record["tokens"]] * record["count"]
    why = "sampled rounds measured no slower than the greedy-fitted cores predict; the mean difference was"
    per_level, level_issues = floored_at_zero("sampling", "extra_s_per_draft_level", float(np.mean(extra_draft)),
                                              "warning", why)
    per_token, token_issues = floored_at_zero("sampling", "extra_s_per_verified_token", float(np.mean(extra_verify)),
                                              "warning", why)
    return (per_level, per_token), level_issues + token_issues


def fit_runs(runs: dict[str, list[RunResult]], lengths: list[int], specs: dict[str, ModelSpec],
             peaks: tuple[float, float], source: str, row_ratios: dict[str, tuple[float, ...]] | None = None) -> RunFits:
    """Both cores, both profiles and sampling's extra work from calibration runs (name -> one
    RunResult per prompt); `peaks` the (verify, draft) cores' peak FLOP/s for their backends' dtypes,
    `row_ratios` (target, draft) the measured linear-layer row ratios."""
    row_ratios = row_ratios or {}
    peak, draft_peak = peaks
    greedy = [r for spec in CALIBRATION_TREES for r in runs[spec]]
    records = stage_records(runs["ar"] + greedy, lengths * (1 + len(CALIBRATION_TREES)))
    target = fit_core([r for r in records if r["model"] == "target"], specs["target"], peak, "local-core-0", source,
                      row_ratios.get("target", ()))
    draft = fit_core([r for r in records if r["model"] == "draft"], specs["draft"], draft_peak, "local-core-1", source,
                     row_ratios.get("draft", ()))
    traces = [record for r in greedy for record in r.trace]
    sampled = [record for r in runs["sampled"] for record in r.trace]
    greedy_fit = fit_acceptance(traces, "reference/greedy", source)
    sampled_fit = fit_acceptance(sampled, f"reference/T{SAMPLED_TEMPERATURE:g}", source)
    extra, extra_issues = sampled_extra_s(runs["sampled"], lengths, specs, draft.device, target.device)
    return RunFits(target, draft, greedy_fit.profile, sampled_fit.profile, extra,
                   tuple(acceptance_issues(greedy_fit) + acceptance_issues(sampled_fit) + extra_issues))


def calibration_steps(prompts: int) -> int:
    """Progress steps of `calibrate`: warm-up, every calibration run, the linear layers, the pipe,
    the fits and traces."""
    return 1 + prompts * len(calibration_jobs((0,), 0)) + 3


def measure_row_ratios(target: Model, draft: Model, quick: bool) -> dict[str, tuple[float, ...]]:
    """Each model's linear layers at 1..LINEAR_ROWS rows on the core its stage runs on (verify on the
    first, draft on the second, as TwoStageRuntime pins them), as multiples of one row's time: the
    numpy engine's products, or torch's in the backend's dtype (bfloat16's few-row products cost
    nearly one row's: issue 19)."""
    cpus = stage_cpus()
    out = {}
    for index, (role, model) in enumerate((("target", target), ("draft", draft))):
        seconds = linear_row_times(model.weights, repeats=9 if quick else 25,
                                   cpu=cpus[index] if len(cpus) >= 2 else None)
        out[role] = tuple(float(s / seconds[0]) for s in seconds)
    return out


def calibrate(target: Model, draft: Model, specs: dict[str, ModelSpec], prompts: list[tuple[int, ...]], quick: bool,
              stamp: str, progress: Progress | None = None, dtype: str = "float32",
              draft_dtype: str | None = None) -> Calibration:
    """Decode the calibration configurations on `prompts`, time the pipe, fit everything; `dtype` and
    `draft_dtype` (default: `dtype`) the stages' backends' dtypes, whose peaks their cores are fitted
    against."""
    step = _Steps(progress, calibration_steps(len(prompts)))
    runs: dict[str, list[RunResult]] = {}
    with TwoStageRuntime(target, draft) as runtime:
        step("warm-up")
        warm_up(runtime, prompts[0])
        for index, prompt in enumerate(prompts):
            for name, job in calibration_jobs(prompt, index).items():
                step(f"prompt {index + 1}/{len(prompts)} {name}")
                runs.setdefault(name, []).append(runtime.run(job))
    source = f"dfvg-dse calibrate {stamp}, {len(prompts)} calibration prompts"
    step("linear layers at 1-16 rows")
    row_ratios = measure_row_ratios(target, draft, quick)
    step("pipe")
    pipe = measure_pipe(quick, source)
    peak, clock, peak_source = core_peak_flops_per_s(dtype)
    draft_peak, _, draft_peak_source = core_peak_flops_per_s(draft_dtype or dtype)
    step("fits and teacher-forced traces")
    fits = fit_runs(runs, [len(p) for p in prompts], specs, (peak, draft_peak), source, row_ratios)
    profiles = with_traces(target, draft, prompts, fits.greedy_profile, fits.sampled_profile, 0, source)
    return Calibration(fits.target_fit, fits.draft_fit, with_messages(pipe, runs), *profiles, peak, clock, peak_source,
                       fits.sampled_extra_s, fits.issues, draft_peak, draft_peak_source)


def validation_steps(prompts: int, cases: int) -> int:
    """Progress steps of `validate`: warm-up, per prompt its calibration runs and every case, the fits."""
    return 1 + prompts * (len(calibration_jobs((0,), 0)) + cases) + 1


def validate(target: Model, draft: Model, parts: Parts, cases: list[Case], prompts: list[tuple[int, ...]],
             calibration: Calibration, stamp: str, progress: Progress | None = None) -> tuple[list[dict], Window]:
    """Per prompt, the calibration runs and every case, interleaved; then the comparison with the
    in-window prediction (and the calibration's, in `*_calibration_half` columns)."""
    step = _Steps(progress, validation_steps(len(prompts), len(cases)))
    runs: dict[str, list] = {case.name: [] for case in cases}
    window: dict[str, list[RunResult]] = {}
    with TwoStageRuntime(target, draft) as runtime:
        step("warm-up")
        warm_up(runtime, prompts[0])
        for index, prompt in enumerate(prompts):
            for name, job in calibration_jobs(prompt, 1000 + index).items():
                step(f"prompt {index + 1}/{len(prompts)} calibration {name}")
                window.setdefault(name, []).append(runtime.run(job))
            for case in cases:
                step(f"prompt {index + 1}/{len(prompts)} {case.name}")
                rule = drafting_rule(case, parts.greedy_profile)
                if isinstance(rule, TreeSpec):
                    rule = (tuple(rule.parents), tuple(rule.ranks))
                runs[case.name].append(runtime.run(Job(prompt, NEW_TOKENS, rule, Sampling(case.temperature),
                                                       seed=index, schedule=case.schedule, trace=True)))
    source = f"calibration runs interleaved with the validation runs, {stamp}"
    step("fits and teacher-forced traces")
    fits = fit_runs(window, [len(p) for p in prompts], {"target": parts.target, "draft": parts.draft},
                    calibration.peaks, source,
                    {"target": calibration.target_fit.device.linear_row_ratios,
                     "draft": calibration.draft_fit.device.linear_row_ratios})
    greedy, sampled = with_traces(target, draft, prompts, fits.greedy_profile, fits.sampled_profile, 1000, source)
    pipe = dataclasses.replace(calibration.link, issues=())  # the calibration's pipe, whose issues it reports
    fit = Window(fits.target_fit, fits.draft_fit, with_messages(pipe, window), fits.issues)
    in_window = dataclasses.replace(parts, verify_device=fit.target_fit.device, draft_device=fit.draft_fit.device,
                                    greedy_profile=greedy, sampled_profile=sampled,
                                    sampled_extra_s=fits.sampled_extra_s, link=fit.link.link)
    bursty = fit_bursty([r.trace for spec in CALIBRATION_TREES for r in window[spec]], "reference/bursty",
                        f"calibration runs interleaved with the validation runs, {stamp}")
    rows = []
    for case in cases:
        row = compare(case, predict(case, in_window), summarise_runs(runs[case.name]))
        row.update(statistical_columns(case, bursty, in_window, row["measured_tokens_per_round"]))
        other = predict(case, parts)
        row["predicted_tokens_per_round_calibration_half"] = other["tokens_per_round"]
        row["error_tokens_per_round_calibration_half"] = other["tokens_per_round"] / row["measured_tokens_per_round"] - 1
        row["predicted_tokens_per_s_calibration_half"] = other["tokens_per_s"]
        row["error_tokens_per_s_calibration_half"] = other["tokens_per_s"] / row["measured_tokens_per_s"] - 1
        rows.append(row)
    return rows, fit


def statistical_columns(case: Case, bursty, parts: Parts, measured: float) -> dict:
    """Tokens per round of a greedy static tree from summary statistics instead of the replayed
    trace, reported beside it: rounds drawn independently from the depth x rank profile, and the
    two-state model (acceptance/bursty.py). Empty for other cases."""
    rule = drafting_rule(case, parts.greedy_profile)
    if case.temperature or not isinstance(rule, TreeSpec):
        return {"predicted_tokens_per_round_iid": None, "error_tokens_per_round_iid": None,
                "predicted_tokens_per_round_bursty": None, "error_tokens_per_round_bursty": None}
    iid = expected_tokens(rule, dataclasses.replace(parts.greedy_profile, trace=None))
    two_state, _ = simulate_rounds(rule, bursty, run_tokens=NEW_TOKENS)
    return {"predicted_tokens_per_round_iid": iid, "error_tokens_per_round_iid": iid / measured - 1,
            "predicted_tokens_per_round_bursty": two_state, "error_tokens_per_round_bursty": two_state / measured - 1}
