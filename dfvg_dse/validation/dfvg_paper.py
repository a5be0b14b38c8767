"""DFVG's own published speedups (issue 14, deliver 5) against the heterogeneous pipeline's prediction:
the draft on the FPGA, the verify on the GPU, the paper's setting as the `dfvg-paper` preset states it
(pipeline/presets.py). Never fitted, and not in the speculative median: DFVG prints no accepted tokens
per round, so the acceptance is the pair's profile, whose `source` says whether it is the paper's
token-level rate or an assumption."""

from __future__ import annotations

from dfvg_dse.pipeline.estimate import Estimate
from dfvg_dse.pipeline.scenarios import Setup, compare


def preset_checks(paper: dict) -> list[tuple[str, str, float]]:
    """(target, scenario, published speedup) for each point figure of the paper: the full design on
    each pair it prints a speedup for, and the ablation's steps on its pair (the last step, +overlap,
    is the full design: its row is the headline's)."""
    headline = [(target, "dfvg", speedup) for target, speedup in paper["speedup"].items()]
    steps = [(paper["ablation_target"], step, speedup) for step, speedup in paper["ablation"].items()
             if step != "+overlap"]
    return headline + steps


def dfvg_paper_report(setups: dict[str, Setup], paper: dict, rounds: int) -> list[dict]:
    """One record per preset_checks figure, its setup from `setups` (by target): the scenario's speedup
    over AR on the same GPU against the paper's."""
    checks = preset_checks(paper)
    estimates = {target: compare(setup, rounds, tuple(name for t, name, _ in checks if t == target))
                 for target, setup in setups.items()}
    return [_record(paper["source"], target, name, setups[target], estimates[target][name], published)
            for target, name, published in checks]


def _record(source: str, target: str, name: str, setup: Setup, estimate: Estimate, published: float) -> dict:
    """A DFVG figure against its scenario's estimate (no number where the design does not fit)."""
    predicted = estimate.speedup_vs_ar  # None where the design does not fit (a changed hwdb entry)
    return {"source": source, "target": target, "draft": setup.draft.name,
            "gpu": setup.gpu.name, "fpga": setup.fpga.name, "scenario": name,
            "acceptance": setup.acceptance.name, "first_rank_acceptance": setup.acceptance.rank_probs[0],
            "acceptance_source": setup.acceptance.source, "tokens_per_round": estimate.expected_tokens_per_round,
            "published_speedup": published, "predicted_speedup": predicted,
            "error": None if predicted is None else predicted / published - 1.0,
            "infeasible": "" if estimate.feasible else estimate.reason}
