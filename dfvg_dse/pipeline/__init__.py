"""The heterogeneous pipeline: round shapes, stage times, schedules, energy, and one `estimate`."""

from dfvg_dse.pipeline.energy import EnergyEstimate, energy
from dfvg_dse.pipeline.estimate import Estimate, estimate
from dfvg_dse.pipeline.rounds import (RoundShape, StageTimes, hit_probability, rank0_chain_length, round_shape,
                                      stage_times)
from dfvg_dse.pipeline.schedule import Timeline, expected_round, feasibility, timeline

__all__ = ["EnergyEstimate", "Estimate", "RoundShape", "StageTimes", "Timeline", "energy", "estimate",
           "expected_round", "feasibility", "hit_probability", "rank0_chain_length", "round_shape", "stage_times",
           "timeline"]
