"""Validation (issue 7): the analytical model's prediction of each reference-decoder configuration
against its measurement — tokens per round, per-stage time, decode tokens/s, link bytes — with
the error budget. Pure functions: the runs themselves are made by `validation.run`.

Acceptance comes from teacher-forced traces of the target's own text (specs.AcceptanceTrace):
static trees replay them exactly (greedy) or in expectation (sampled chains), ADAPT approximately
(acceptance/replay.py). Predictions from summary statistics — independent rounds from a depth x
rank profile, and the two-state model — are reported beside them (`*_iid`, `*_bursty`)."""


from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from dfvg_dse.pipeline.estimate import estimate
from dfvg_dse.specs import AcceptanceProfile, AdaptRule, DecodeConfig, DeviceSpec, LinkSpec, ModelSpec, SystemSpec
from dfvg_dse.specs.decoding import TreeSpec
from dfvg_dse.tree import parse_tree_spec
from dfvg_dse.tree.optimal import optimal_tree

TOKENS_PER_ROUND_BUDGET = 0.03  # every configuration
TOKENS_PER_S_MAPE_BUDGET = 0.10  # mean over configurations
SAMPLED_TEMPERATURE = 0.8
OPTIMAL_BUDGET, OPTIMAL_DEPTH = 8, 6
VALIDATION_ADAPT = AdaptRule(threshold=0.05, temperature=0.0, k_max=4, budget=8, min_depth=2, max_depth=6)


@dataclass(frozen=True)
class Case:
    """One configuration: drafting (a tree SPEC, "optimal", "adapt" or "ar"), schedule, temperature."""

    drafting: str
    schedule: str = "sequential"
    temperature: float = 0.0

    @property
    def name(self) -> str:
        tail = f" T={self.temperature:g}" if self.temperature else ""
        return "ar" if self.drafting == "ar" else f"{self.drafting} {self.schedule}{tail}"


def cases(quick: bool) -> list[Case]:
    """The configuration set: AR; chain gamma 2, 4, 8, two static trees, the optimal tree and
    ADAPT under both schedules; chain:4 sampled. --quick keeps AR and chains 2 and 4."""
    if quick:
        return [Case("ar")] + [Case(d, s) for d in ("chain:2", "chain:4") for s in ("sequential", "overlap")]
    drafts = ("chain:2", "chain:4", "chain:8", "kary:2x2", "seq:2x3", "optimal", "adapt")
    return [Case("ar")] + [Case(d, s) for d in drafts for s in ("sequential", "overlap")] + \
        [Case("chain:4", s, SAMPLED_TEMPERATURE) for s in ("sequential", "overlap")]


@dataclass(frozen=True)
class Parts:
    """Everything a prediction needs: the models, the calibrated devices and link, the profiles."""

    target: ModelSpec
    draft: ModelSpec
    verify_device: DeviceSpec
    draft_device: DeviceSpec
    link: LinkSpec
    greedy_profile: AcceptanceProfile
    sampled_profile: AcceptanceProfile
    context: int
    # sampling's extra work per drafting level and per verified token (s), measured on another tree
    sampled_extra_s: tuple[float, float] = (0.0, 0.0)


def drafting_rule(case: Case, profile: AcceptanceProfile):
    """The tree (TreeSpec) or dynamic rule a case drafts with; None for AR."""
    if case.drafting == "ar":
        return None
    if case.drafting == "adapt":
        return VALIDATION_ADAPT
    if case.drafting == "optimal":
        return optimal_tree(profile, OPTIMAL_BUDGET, OPTIMAL_DEPTH).tree
    return parse_tree_spec(case.drafting)


def decode_config(case: Case, parts: Parts) -> DecodeConfig:
    profile = parts.sampled_profile if case.temperature else parts.greedy_profile
    rule = drafting_rule(case, parts.greedy_profile)
    draft_device, verify_device = parts.draft_device, parts.verify_device
    if case.temperature:  # softmax, top-p sort and draws per level; residual walks per verification
        draft_device = dataclasses.replace(draft_device, forward_overhead_s=draft_device.forward_overhead_s
                                           + parts.sampled_extra_s[0])
        verified = len(rule.parents) if isinstance(rule, TreeSpec) else 1  # sampled cases draft static trees
        verify_device = dataclasses.replace(verify_device, forward_overhead_s=verify_device.forward_overhead_s
                                            + parts.sampled_extra_s[1] * verified)
    common = dict(target=parts.target, system=SystemSpec(draft_device, verify_device, parts.link),
                  context=parts.context, name=case.name)
    if rule is None:
        return DecodeConfig(**common, schedule="ar")
    return DecodeConfig(**common, draft=parts.draft, acceptance=profile, schedule=case.schedule,
                        tree=rule if isinstance(rule, TreeSpec) else None,
                        dynamic=None if isinstance(rule, TreeSpec) else rule,
                        send_draft_probs=bool(case.temperature))


def predict(case: Case, parts: Parts) -> dict:
    """Predicted tokens per round (bonus included), stage times, decode tokens/s, link bytes per round."""
    result = estimate(decode_config(case, parts))
    if not result.feasible:
        raise ValueError(f"{case.name}: the model calls it infeasible: {result.reason}")
    if case.drafting == "ar":
        return {"tokens_per_round": 1.0, "draft_s": 0.0, "verify_s": result.round_time_s,
                "tokens_per_s": result.tokens_per_s, "link_bytes": 0.0}
    link = result.link or {}
    return {"tokens_per_round": result.expected_tokens_per_round, "draft_s": result.stages["draft"]["time_s"],
            "verify_s": result.stages["verify"]["time_s"], "tokens_per_s": result.tokens_per_s,
            "link_bytes": link.get("down_bytes", 0.0) + link.get("up_bytes", 0.0)}


def summarise_runs(runs: list) -> dict:
    """Measured over runs (stages.RunResult with traces): decode-only tokens/s (prefill excluded,
    as the model has none) as all tokens over all time — the workload's throughput, and what
    pooled tokens per round and mean stage times predict; a mean of per-prompt rates would weight
    the fast, well-predicted prompts up (Jensen) — then tokens per round from accepted paths,
    stage times and bytes, pooled over rounds."""
    rate = sum(len(r.tokens) - 1 for r in runs) / sum(r.seconds - r.prefill_s for r in runs)
    rounds = [record for r in runs for record in r.trace]
    if not rounds:  # autoregressive
        return {"tokens_per_round": 1.0, "draft_s": 0.0,
                "verify_s": 1.0 / rate, "tokens_per_s": rate, "link_bytes": 0.0}
    return {"tokens_per_round": float(np.mean([len(x["accepted"]) for x in rounds])),
            "draft_s": float(np.mean([x["draft_end_s"] - x["draft_start_s"] for x in rounds])),
            "verify_s": float(np.mean([x["verify_end_s"] - x["verify_start_s"] for x in rounds])),
            "tokens_per_s": rate,
            "link_bytes": float(np.mean([x["link_bytes"] for x in rounds]))}


METRICS = ("tokens_per_round", "draft_s", "verify_s", "tokens_per_s", "link_bytes")


def compare(case: Case, predicted: dict, measured: dict) -> dict:
    """One table row: predicted, measured and relative error (predicted / measured - 1) per metric."""
    row = {"config": case.name, "drafting": case.drafting, "schedule": "" if case.drafting == "ar" else case.schedule,
           "temperature": case.temperature}
    for metric in METRICS:
        p, m = predicted[metric], measured[metric]
        row[f"predicted_{metric}"], row[f"measured_{metric}"] = p, m
        row[f"error_{metric}"] = (p / m - 1.0) if m else (0.0 if not p else float("inf"))
    return row


def summary(rows: list[dict], issues=()) -> dict:
    """The error budget over the rows, and the fits' issues (validation.calibrate.FitIssue): a
    prediction made from a suspect fit does not pass, whatever its errors (docs/validation.md)."""
    tps = [abs(r["error_tokens_per_s"]) for r in rows]
    tpr = [abs(r["error_tokens_per_round"]) for r in rows]
    mape = float(np.mean(tps))
    worst = float(np.max(tpr))
    within = bool(mape <= TOKENS_PER_S_MAPE_BUDGET and worst <= TOKENS_PER_ROUND_BUDGET)
    suspect = [issue.message for issue in issues if issue.suspect]
    return {"mape_tokens_per_s": mape, "max_error_tokens_per_round": worst,
            "tokens_per_round_budget": TOKENS_PER_ROUND_BUDGET, "tokens_per_s_mape_budget": TOKENS_PER_S_MAPE_BUDGET,
            "within_budget": within, "calibration_suspect": bool(suspect), "suspect": suspect,
            "warnings": list(dict.fromkeys(issue.message for issue in issues)),
            "passed": within and not suspect,
            "misses": [r["config"] for r in rows if abs(r["error_tokens_per_round"]) > TOKENS_PER_ROUND_BUDGET
                       or abs(r["error_tokens_per_s"]) > 2 * TOKENS_PER_S_MAPE_BUDGET]}
