"""A search under load (`search --rate`, docs/serving.md, "In a search"): each design is served at the
offered rate and priced by what users get there.

The objectives keep their columns, read under load: speed per sequence is 1 / the mean TPOT (what
one user sees at that rate), J/token is the run's energy over its tokens, and $/Mtoken is the
devices' price over the run per million tokens of *goodput* (tokens of requests within both SLOs):
minimising it maximises goodput per dollar. A design whose SLO attainment is below the setup's
(90%) is infeasible, its shortfall a fourth constraint. The space's batch choices are the engine's
speculation cutoff (speculate above that batch no more): the search picks it.
"""

from __future__ import annotations

import dataclasses
import math

from dfvg_dse.pipeline.grid import SearchSpace, adapt_rule, shape_key
from dfvg_dse.serving import iteration_costs, serve, workload_contexts
from dfvg_dse.specs import DecodeConfig, InputError, SpecError, SystemSpec, TreeSpec
from dfvg_dse.specs.serving import engine_batching

SLO_CONSTRAINT = "slo_shortfall"  # the required SLO attainment minus the design's


def _config(space: SearchSpace, point: dict, drafter, verifier, shapes, lookup) -> DecodeConfig:
    """The design of a point as a DecodeConfig at batch 1 (the load sets the batch); SpecError or
    InputError when it cannot be built (overlap on one device, a tree the space lacks, no link)."""
    same = drafter.name == verifier.name
    link = None if same else space.link_for(drafter)
    if not same and link is None:
        raise InputError(f"no link from '{drafter.name}' to '{verifier.name}' in the space")
    tree = rule = None
    if point["family"] == "adapt":
        rule = adapt_rule(space, drafter, verifier, 1, point["width"], point["budget"], point["threshold"],
                          point["window_ratio"], point["temperature"], point["depth"])
    else:
        index = lookup.get(shape_key(point["family"], point["width"], point["depth"], point["budget"]))
        if index is None:
            raise InputError("no such tree in the space (too many nodes or a duplicate shape)")
        tree = TreeSpec(shapes[index].parents, shapes[index].ranks)
    return DecodeConfig(space.target, SystemSpec(drafter, verifier, link), space.draft, space.acceptance, tree=tree,
                        dynamic=rule, schedule="sequential" if point["schedule"] == "sequential" else "overlap",
                        gpu_fill=point["schedule"] == "overlap-fill", batch=1, context=space.context,
                        sync_s=space.sync_s, record_bytes=space.record_bytes)


def serve_point(space: SearchSpace, point: dict, drafter, verifier, shapes, lookup, needs_price: bool) -> dict:
    """Objectives, constraints and the serving metrics of one design under the space's load."""
    setup = space.serving
    try:
        config = _config(space, point, drafter, verifier, shapes, lookup)
    except (SpecError, InputError) as err:
        return {"feasible": False, "reason": str(err), "constraints": (-1.0, -1.0, 1.0, 1.0)}
    batching = dataclasses.replace(setup.batching, speculate_max_batch=int(point["batch"])) if setup.batching \
        else engine_batching(verifier, speculate_max_batch=int(point["batch"]))
    try:
        costs = iteration_costs(config, batching, workload_contexts(setup.workload), setup.load.seed,
                                rounds=space.adapt_rounds)
        m = serve(config, costs, setup.workload, setup.load, batching).metrics
    except InputError as err:  # the verifier's cache cannot hold a request of the workload
        return {"feasible": False, "reason": str(err), "constraints": (-1.0, 1.0, -1.0, 1.0)}
    price = costs.price_usd_per_s
    usd = None if price is None or not m.good_output_tokens else price * m.duration_s / m.good_output_tokens * 1e6
    attainment = 1.0 if m.slo_attainment is None else m.slo_attainment  # no request drawn: nothing missed
    shortfall = setup.min_attainment - attainment
    reason = "" if shortfall <= 0 else (f"{attainment:.0%} of requests within the SLOs at {setup.load.rate_per_s:g} "
                                        f"requests/s, under the {setup.min_attainment:.0%} required")
    placement = -1.0
    if not reason and needs_price and usd is None:
        reason, placement = "no price per hour for a device of the design", 1.0
    tpot = m.tpot_s["mean"]
    return {"feasible": not reason, "reason": reason,
            "tokens_per_s": m.throughput_tokens_per_s,
            "tokens_per_s_per_sequence": 1.0 / tpot if tpot else None,
            "j_per_token": m.j_per_token, "usd_per_mtoken": usd,
            "goodput_tokens_per_s": m.goodput_tokens_per_s, "slo_attainment": attainment,
            "ttft_p90_s": m.ttft_s["p90"], "tpot_p50_s": m.tpot_s["p50"], "tpot_p90_s": m.tpot_s["p90"],
            "speculative_share": m.speculative_share, "mean_decode_batch": m.mean_decode_batch,
            "speculate_max_batch": int(point["batch"]), "expected_tokens_per_round": costs.expected_tokens,
            "parents": list(config.tree.parents) if config.tree is not None else [-1],
            "ranks": list(config.tree.ranks) if config.tree is not None else [0],
            "constraints": (-1.0, -1.0, placement, shortfall if math.isfinite(shortfall) else 1.0)}
