"""Acceptance models: Leviathan's chain, verification rules, F(T), dynamic drafting, fits from traces."""

from dfvg_dse.acceptance.chain import (expected_tokens_chain, ops_factor_chain, optimal_gamma, speedup_chain,
                                       speedup_lower_bound_gamma1)
from dfvg_dse.acceptance.checks import acceptance_warnings
from dfvg_dse.acceptance.dynamic import (AdaptRule, DuoRule, DynamicEstimate, Eagle2Rule, duo_sequences,
                                         min_depth_for_windows, simulate_adapt, simulate_duodecoding,
                                         simulate_eagle2)
from dfvg_dse.acceptance.expected import (expected_tokens, expected_tokens_many, expected_tokens_sequences,
                                          node_scores)
from dfvg_dse.acceptance.replay import AdaptReplay, ReplayResult, can_replay, replay, replay_adapt
from dfvg_dse.acceptance.verify import (greedy_acceptance, sequoia_acceptance, sequoia_output,
                                        single_token_acceptance, specinfer_acceptance, specinfer_output)

__all__ = [
    "AdaptRule", "DuoRule", "acceptance_warnings", "DynamicEstimate", "Eagle2Rule", "FitResult", "TraceRound", "check_round",
    "duo_sequences", "expected_tokens", "expected_tokens_chain", "expected_tokens_many", "expected_tokens_sequences",
    "fit_profile", "greedy_acceptance", "min_depth_for_windows", "node_scores", "ops_factor_chain", "optimal_gamma",
    "rank_counts", "ReplayResult", "AdaptReplay", "can_replay", "replay", "replay_adapt",
    "sequoia_acceptance", "sequoia_output", "simulate_adapt", "simulate_duodecoding",
    "simulate_eagle2", "single_token_acceptance", "specinfer_acceptance", "specinfer_output", "speedup_chain",
    "speedup_lower_bound_gamma1",
]

# Fits from traces need scipy.optimize (0.3 s to import): loaded on first use, not with the package.
_FROM_CALIBRATE = ("FitResult", "TraceRound", "check_round", "fit_profile", "rank_counts")


def __getattr__(name: str):
    if name in _FROM_CALIBRATE:
        from dfvg_dse.acceptance import calibrate

        return getattr(calibrate, name)
    raise AttributeError(f"module 'dfvg_dse.acceptance' has no attribute {name!r}")
