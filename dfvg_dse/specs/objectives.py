"""The search's objectives as data (docs/search.md, "Objectives").

A search maximises decode speed per sequence and minimises one cost: energy per token (the default)
or dollars per million tokens (rented devices' prices per hour over the batch's aggregate tokens/s).
Everything above (the grid, the sampler's values, fronts, picks, hypervolumes, plots, run files)
reads its column, label and pick name from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from dfvg_dse.specs.hardware import InputError

SPEED = "tokens_per_s_per_sequence"  # the first objective, maximised: what one user sees
SPEED_FLAG = "tokens_per_s"  # as --objectives spells it


@dataclass(frozen=True)
class CostObjective:
    """A minimised second objective: its column in trial tables, its axis label and unit, and the
    name of the front's pick that minimises it."""

    column: str
    label: str
    unit: str
    pick: str
    needs_price: bool = False  # a design is infeasible unless every device it uses has a price per hour


COSTS = {c.column: c for c in (
    CostObjective("j_per_token", "energy per token", "J/token", "min-energy"),
    CostObjective("usd_per_mtoken", "cost per million tokens", "$/Mtoken", "min-cost", needs_price=True))}
DEFAULT_COST = "j_per_token"
PICKS = ("max-throughput", *(c.pick for c in COSTS.values()), "knee")  # every pick a run may hold


def cost_objective(column: str | None) -> CostObjective:
    """The cost objective of a column name (None: the default, energy)."""
    return COSTS[column or DEFAULT_COST]


def parse_objectives(text: str, where: str = "--objectives") -> str:
    """The cost column of an --objectives value: `tokens_per_s,COST` with COST one of COSTS."""
    allowed = ", ".join(f"{SPEED_FLAG},{c}" for c in COSTS)
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or parts[0] not in (SPEED_FLAG, SPEED) or parts[1] not in COSTS:
        raise InputError(f"{where} {text!r}: allowed: {allowed} (speed per sequence up, the cost down)")
    return parts[1]
