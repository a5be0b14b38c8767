"""The heterogeneous pipeline: round shapes, stage times, schedules, energy, and one `estimate`."""

from dfvg_dse.pipeline.energy import EnergyEstimate, energy
from dfvg_dse.pipeline.estimate import Estimate, estimate
from dfvg_dse.pipeline.rounds import (RoundShape, StageTimes, draft_time_s, hit_probability, link_bytes,
                                      rank0_chain_length, round_shape, stage_times, verify_time_s)
from dfvg_dse.pipeline.schedule import Timeline, expected_round, feasibility, timeline

__all__ = ["EnergyEstimate", "Estimate", "RoundShape", "StageTimes", "Timeline", "draft_time_s", "energy",
           "estimate", "expected_round", "feasibility", "hit_probability", "link_bytes", "rank0_chain_length",
           "round_shape", "stage_times", "timeline", "verify_time_s"]
