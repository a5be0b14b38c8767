"""DFVG's own published speedups (issue 14, deliver 5) against the heterogeneous pipeline's prediction:
the draft on the FPGA, the verify on the GPU, the paper's setting as the `dfvg-paper` preset states it
(pipeline/presets.py). Never fitted, and not in the speculative median: DFVG prints no accepted tokens
per round, so the acceptance is the pair's profile, whose `source` says whether it is the paper's
token-level rate or an assumption."""

from __future__ import annotations

from dfvg_dse.pipeline.scenarios import Setup, scenario


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
    records = []
    baselines: dict[str, float] = {}
    for target, name, published in preset_checks(paper):
        setup = setups[target]
        if target not in baselines:
            baselines[target] = scenario(setup, "ar", None, rounds).tokens_per_s
        estimate = scenario(setup, name, baselines[target], rounds)
        predicted = estimate.speedup_vs_ar  # None where the design does not fit (a changed hwdb entry)
        records.append({"source": paper["source"], "target": target, "draft": setup.draft.name,
                        "gpu": setup.gpu.name, "fpga": setup.fpga.name, "scenario": name,
                        "acceptance": setup.acceptance.name, "first_rank_acceptance": setup.acceptance.rank_probs[0],
                        "acceptance_source": setup.acceptance.source,
                        "tokens_per_round": estimate.expected_tokens_per_round,
                        "published_speedup": published, "predicted_speedup": predicted,
                        "error": None if predicted is None else predicted / published - 1.0,
                        "infeasible": "" if estimate.feasible else estimate.reason})
    return records
