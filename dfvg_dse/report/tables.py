"""Records (plain dicts, JSON-ready, keys carrying units) built from specs and cost results.

Nothing here prints or reads files: the CLI formats what these functions return.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from dfvg_dse.acceptance import acceptance_warnings, expected_tokens
from dfvg_dse.costs import compute_dtype_warnings, device_forward_cost, knee_tokens, memory_fit, param_counts
from dfvg_dse.costs.heads import features_up_bytes, head_param_counts
from dfvg_dse.costs.processor import engine_rates
from dfvg_dse.costs.work import stored_weight_bytes, weight_bytes
from dfvg_dse.specs.parallel import unit_of
from dfvg_dse.pipeline.pareto import pareto_mask
from dfvg_dse.specs import DeviceSpec, LinkSpec, ModelSpec
from dfvg_dse.specs.objectives import SPEED, CostObjective, cost_objective
from dfvg_dse.tree import to_choices, to_vllm_literal


def json_safe(value):
    """NaN and infinities become None (JSON null, 'no value'); numpy scalars become Python numbers."""
    if hasattr(value, "item") and not isinstance(value, (list, dict)):
        value = value.item()
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _spec_dict(spec) -> dict:
    record = dataclasses.asdict(spec)
    if isinstance(spec, DeviceSpec):
        record["peak_flops_per_s"] = dict(spec.peak_flops_per_s)
        if spec.fpga is not None:
            record["fpga"]["peak_flops_per_s"] = spec.fpga.peak_flops_per_s
            record["fpga"]["sram_bytes"] = spec.fpga.sram_bytes
        for tier, raw in zip(spec.memory, record["memory"]):
            raw["achieved_bandwidth_bytes_per_s"] = tier.achieved_bandwidth_bytes_per_s
    if isinstance(spec, LinkSpec):
        record["achieved_bandwidth_bytes_per_s"] = spec.achieved_bandwidth_bytes_per_s
    return record


def hw_record(entry) -> dict:
    """A hardware entry (catalog HwEntry) as a dict: SI spec and the provenance of every number."""
    return {
        "name": entry.spec.name,
        "kind": entry.kind,
        "display_name": entry.spec.display_name,
        "path": str(entry.path),
        "spec": _spec_dict(entry.spec),
        "sources": {field: q._asdict() for field, q in entry.quantities.items()},
    }


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def hw_summary(entry) -> str:
    """One line of key figures for `hw list`."""
    spec = entry.spec
    if isinstance(spec, LinkSpec):
        return (f"{_si(spec.bandwidth_bytes_per_s, 'B/s')} per direction x{spec.efficiency:.2f}, "
                f"{spec.hops} hop(s) of {spec.latency_s * 1e6:.3g} us, {spec.path}")
    tiers = " + ".join(f"{t.tier} {_si(t.capacity_bytes, 'B')} @ {_si(t.bandwidth_bytes_per_s, 'B/s')}"
                       for t in spec.memory)
    dtype = next(d for d in ("fp16", "bf16", "fp32") if d in dict(spec.peak_flops_per_s))
    price = f"; ${spec.price_usd_per_s * 3600:.2f}/h" if spec.price_usd_per_s is not None else ""
    return f"{_si(spec.peak_for(dtype), 'FLOP/s')} {dtype}; {tiers}; {spec.tdp_w:.0f} W{price}"


def device_inputs(spec: DeviceSpec) -> list[tuple[str, str]]:
    """What the cost model uses for a device, after defaults: (quantity, value with unit) rows."""
    rows = [(f"peak {dtype}", _si(peak, "FLOP/s")) for dtype, peak in spec.peak_flops_per_s]
    if spec.fpga is not None:
        f = spec.fpga
        rows.append(("peak (derived)", f"{f.pe_dsp_count} PE DSPs x 2 x {f.products_per_dsp} products x "
                                       f"{f.clock_hz / 1e6:g} MHz = {_si(f.peak_flops_per_s, 'FLOP/s')}"))
        rows.append(("on-chip SRAM", f"{_si(f.sram_bytes, 'B')} @ {_si(f.sram_bandwidth_bytes_per_s, 'B/s')} "
                                     f"x {f.sram_efficiency:g}"))
        rows.append(("branch lanes", str(f.branch_lanes)))
    rows.append(("achieved compute fraction", f"{spec.eta_compute:g}"))
    rows += [(f"{t.tier} memory", f"{_si(t.capacity_bytes, 'B')} @ {_si(t.bandwidth_bytes_per_s, 'B/s')} x "
                                  f"{t.efficiency:g} = {_si(t.achieved_bandwidth_bytes_per_s, 'B/s')}")
             for t in spec.memory]
    rows.append(("fixed overhead", f"{spec.forward_overhead_s * 1e6:g} us per forward + "
                                   f"{spec.layer_overhead_s * 1e6:g} us per layer"))
    rows.append(("power", f"TDP {spec.tdp_w:g} W, decode {spec.decode_power_w:g} W, idle {spec.idle_power_w:g} W"))
    return rows


def model_record(entry) -> dict:
    """A model entry (catalog ModelEntry) as a dict: spec, parameter counts and provenance."""
    counts = param_counts(entry.spec)
    record = {
        "name": entry.spec.name,
        "display_name": entry.spec.display_name,
        "family": entry.spec.family,
        "path": str(entry.path),
        "source": entry.spec.source,
        "tag": entry.tag,
        "params": counts.total,
        # Model-card convention (Qwen, Kaplan et al.): neither the embedding nor the LM head counts.
        "params_non_embedding": counts.total - counts.embedding - (0 if entry.spec.tied_embeddings else counts.head),
        "weight_bytes": stored_weight_bytes(entry.spec),
        "kv_bytes_per_token": entry.spec.kv_bytes_per_token,
        "spec": dataclasses.asdict(entry.spec),
    }
    if entry.spec.moe is not None:  # the model cards' "active" (no embedding row) and the routed experts
        record["params_active"], record["params_routed_experts"] = counts.active, counts.routed
    if counts.mtp:
        record["params_mtp"] = counts.mtp
    if entry.published_params is not None:
        record["published_params"] = entry.published_params._asdict()
    return record


def head_record(entry) -> dict:
    """A draft head (catalog HeadEntry) as a dict: kind, target, parameter counts, the target
    hidden states it reads per token and the bytes it streams per drafted token (costs/heads.py)."""
    spec, counts = entry.spec, head_param_counts(entry.spec)
    # at the target's widths (its LM head at head_dtype where the checkpoint keeps it apart: DeepSeek-V3)
    step_bytes = float(weight_bytes(spec.target, counts.matmul_per_step, 0.0, counts.own_head + counts.shared_head))
    return {"name": spec.name, "display_name": spec.display_name, "kind": spec.kind, "target": spec.target.name,
            "path": str(entry.path), "source": spec.source, "tag": entry.tag, "params": counts.stored,
            "params_own_lm_head": counts.own_head, "params_shared_target_lm_head": counts.shared_head,
            "matmul_weights_per_draft_token": counts.matmul_per_step,
            "weight_bytes_per_draft_step": int(step_bytes),
            "feature_layers": spec.feature_layers, "feature_values_per_token": counts.feature_values,
            # Medusa reads the last position's hidden state once a round; the others every accepted token's
            ("features_up_bytes_per_round" if spec.kind == "medusa" else "features_up_bytes_per_accepted_token"):
                int(features_up_bytes(spec, 1)),
            "draft_vocab": spec.draft_vocab or spec.target.vocab_size}


def lookup_record(entry) -> dict:
    """A lookup drafter (catalog LookupEntry) as a dict: its kind's parameters (the n-gram sizes it
    matches; a suffix tree's depth, spec factor and probability floor) and its host-CPU seconds a
    round (costs/stages.py prices batch x (per round + per context token x context))."""
    spec = entry.spec
    return {"name": spec.name, "display_name": spec.display_name, "path": str(entry.path),
            "source": spec.source, "tag": entry.tag, "params": 0, **spec.params,
            "lookup_us_per_round": spec.lookup_s_per_round * 1e6,
            "lookup_ns_per_context_token": spec.lookup_s_per_context_token * 1e9, "cost_source": spec.cost_source}


def weight_stream_bandwidth_bytes_per_s(model: ModelSpec, device: DeviceSpec) -> float:
    """Achieved bandwidth the weights stream at: on-chip SRAM when an FPGA holds them, else main memory."""
    if device.fpga is not None:
        counts = param_counts(model)
        weights = float(weight_bytes(model, counts.read_per_forward, counts.routed, counts.head))
        if weights <= device.fpga.sram_bytes:
            return device.fpga.sram_bandwidth_bytes_per_s * device.fpga.sram_efficiency
    return device.main_memory.achieved_bandwidth_bytes_per_s


def cost_warnings(model: ModelSpec, positions: int) -> list[str]:
    """Conditions the cost model accepts but the user should know about."""
    warnings = []
    if positions > model.max_positions:
        warnings.append(f"context + tokens = {positions} exceeds {model.name}'s max_position_embeddings "
                        f"{model.max_positions}")
    return warnings


COST_CHUNK_POINTS = 4096  # (n, c, b) points evaluated at once: memory stays flat however many are asked for


def cost_records(model: ModelSpec, device: DeviceSpec, tokens, contexts, batches):
    """Time, bound, FLOPs, bytes and memory fit of one forward for every (n, c, b) combination, yielded
    in order, evaluated COST_CHUNK_POINTS at a time."""
    n_all, c_all, b_all = (a.ravel() for a in np.meshgrid(tokens, contexts, batches, indexing="ij"))
    one = unit_of(device)  # rates of one device of a group, as its FLOPs and bytes are one device's
    if one.engine is not None:  # a fitted engine profile's kernels
        peak, bandwidth = engine_rates(model, one, one.engine)
    else:
        peak = one.peak_for(model.compute_dtype) * one.eta_compute
        bandwidth = weight_stream_bandwidth_bytes_per_s(model, one)
    counts = param_counts(model)
    knee = knee_tokens(peak, bandwidth, stored_weight_bytes(model) / counts.total)
    fallback = compute_dtype_warnings(model, device)  # the device lacks the dtype's peak: which rate is used
    for start in range(0, len(n_all), COST_CHUNK_POINTS):
        n, c, b = (x[start:start + COST_CHUNK_POINTS] for x in (n_all, c_all, b_all))
        cost = device_forward_cost(model, device, n, c, b)
        fit = memory_fit(model, device, c + n, b)
        bound = cost.bound_name  # a derived array: computed once per chunk, not once per point
        for i in range(len(n)):
            record = {
                "model": model.name, "device": device.name, "device_kind": device.kind,
                "engine": device.engine.name if device.engine is not None else "roofline",
                "weight_dtype": model.weight_dtype, "tokens": int(n[i]), "context": int(c[i]), "batch": int(b[i]),
                "time_s": float(cost.time_s[i]), "tokens_per_s": float(n[i] * b[i] / cost.time_s[i]),
                "bound": str(bound[i]),
                "compute_time_s": float(cost.compute_time_s[i]), "memory_time_s": float(cost.memory_time_s[i]),
                "overhead_time_s": float(cost.overhead_time_s[i]),
                "communication_time_s": float(np.broadcast_to(cost.communication_time_s, np.shape(cost.time_s))[i]),
                "flops": float(cost.flops[i]), "bytes": float(cost.bytes[i]),
                "achieved_flops_per_s": peak, "achieved_bandwidth_bytes_per_s": bandwidth, "knee_tokens": knee,
                "memory_fit": {"fits": bool(fit.fits[i]), "required_bytes": float(fit.required_bytes[i]),
                               "capacity_bytes": fit.capacity_bytes, "weight_bytes": fit.weight_bytes,
                               "kv_cache_bytes": float(fit.kv_cache_bytes[i])},
            }
            record["passes"] = int(cost.passes[i])
            record["weights_on_chip"] = bool(cost.weights_on_chip[i])
            record["warnings"] = fallback + cost_warnings(model, int(c[i] + n[i]))
            if not fit.fits[i]:  # the time is what the roofline gives; the device could not hold this forward
                record["warnings"].append(f"{model.name} does not fit {device.name}: needs "
                                          f"{float(fit.required_bytes[i]) / 1e9:.3g} GB of "
                                          f"{fit.capacity_bytes / 1e9:.3g} GB")
            yield record


def tree_record(tree, profile) -> dict:
    """A tree and its expected tokens under a profile, with the engine encodings."""
    return {"expected_tokens": expected_tokens(tree, profile), "nodes": tree.n_nodes, "depth": tree.depth,
            "budget": tree.budget, "level_widths": list(tree.level_widths()), "parents": list(tree.parents),
            "ranks": list(tree.ranks), "choices": to_choices(tree), "vllm_speculative_token_tree": to_vllm_literal(tree),
            "acceptance": profile.name, "warnings": acceptance_warnings(profile, tree)}


def profile_record(profile, document: dict) -> dict:
    """An acceptance profile with the metadata of its file."""
    record = {"name": profile.name, "tag": document.get("tag", "unverified"), "source": profile.source,
              "path": document.get("path", ""), "target": document.get("target"), "draft": document.get("draft"),
              "workload": document.get("workload"), "temperature": document.get("temperature"),
              "rank_probs": list(profile.rank_probs),
              "depth_rank": [list(row) for row in profile.depth_rank] if profile.depth_rank else None,
              "ci_low": document.get("rank", {}).get("ci_low"), "ci_high": document.get("rank", {}).get("ci_high"),
              "confidence": None, "trace": None, "published": None}
    fit = document.get("fit", {})
    if fit.get("method") == "from-tau":  # derived from a published mean accepted length (tree/from_tau.py)
        record["published"] = {k: fit.get(k) for k in ("mean_accepted_tokens", "tree_tokens", "tree_depth", "family",
                                                       "measurements")}
    trace = profile.trace
    if trace is not None:
        record["trace"] = {"runs": len(trace.ranks or trace.accept_probs), "run_tokens": trace.run_tokens,
                           "kind": "greedy" if trace.greedy else "sampled",
                           "adapt": bool(trace.top_probs), "file": document.get("trace", {}).get("file")}
    if profile.confidence is not None:
        c = profile.confidence
        record["confidence"] = {"top1_mean": list(c.top1_mean), "concentration": c.concentration,
                                "tail_shares": list(c.tail_shares), "calibration_q": list(c.calibration_q),
                                "calibration_accept": list(c.calibration_accept),
                                "implied_rank_probs": c.mean_rank_probs().tolist()}
    return record


def dynamic_record(estimate, rule: str) -> dict:
    """A dynamic-drafting estimate as JSON-ready numbers."""
    record = {k: v for k, v in estimate._asdict().items() if not k.startswith("round_")}
    record["nodes_per_level"] = [float(x) for x in estimate.nodes_per_level]
    record["rule"] = rule
    return record


def estimate_record(est) -> dict:
    """A pipeline Estimate as JSON-ready numbers (keys carry units)."""
    record = {"name": est.name, "schedule": est.schedule, "feasible": est.feasible, "reason": est.reason,
              "warnings": list(est.warnings)}
    if not est.feasible:
        return record
    e = est.energy
    record.update({
        "tokens_per_s": est.tokens_per_s, "j_per_token": e.j_per_token, "tokens_per_j": e.tokens_per_j,
        "expected_tokens_per_round": est.expected_tokens_per_round, "round_time_s": est.round_time_s,
        "speedup_vs_ar": est.speedup_vs_ar, "ar_tokens_per_s": est.ar_tokens_per_s,
        "energy_efficiency_vs_ar": e.energy_efficiency_vs_ar,
        "energy_efficiency_vs_ar_2dev": e.energy_efficiency_vs_ar_2dev, "ar_j_per_token": e.ar_j_per_token,
        "usd_per_mtoken": e.usd_per_mtoken, "hit_probability": est.hit_probability, "stages": est.stages,
        "link": est.link, "draft_nodes_per_round": est.draft_nodes_per_round, "level_widths": est.level_widths,
        "wasted_draft_fraction": est.wasted_draft_fraction, "fill_tokens_per_round": est.fill_tokens_per_round,
        "exact": est.exact,
        "energy": {"draft_j_per_round": e.draft_energy_j, "verify_j_per_round": e.verify_energy_j,
                   "link_j_per_round": e.link_energy_j},
    })
    return record


def simulation_record(sim, closed_tokens_per_s: float) -> dict:
    """A simulator result and its difference from the closed form."""
    record = sim._asdict()
    record["relative_error_tokens_per_s"] = sim.tokens_per_s / closed_tokens_per_s - 1.0
    return record


class ParetoInfo(NamedTuple):
    """Plot-ready data of a search or sweep: all points, the front, and the recommended picks."""

    tokens_per_s: np.ndarray  # per sequence
    cost: np.ndarray  # the minimised objective (J/token or $/Mtoken)
    objective: CostObjective  # which one, its label and pick
    group: np.ndarray  # placement/schedule label per point
    feasible: np.ndarray
    front: np.ndarray  # indices of the Pareto front, by throughput
    picks: dict  # name -> index: max-throughput, the cost's pick (min-energy, min-cost), knee


def placement_label(draft_device: str, verify_device: str, schedule: str) -> str:
    where = "one device" if draft_device == verify_device else f"{draft_device} -> {verify_device}"
    return f"{where}, {schedule}"


def joint_trials(frames: list):
    """The trial tables of several runs, (run name, table) each, as one table (search --drafter):
    columns `drafter` and `run` (the run's name), `run_trial` (the trial in its run), and `trial`
    numbered anew so that the joint table's trials are distinct."""
    import pandas as pd

    joint = pd.concat([frame.assign(drafter=name, run=name, run_trial=frame["trial"]) for name, frame in frames],
                      ignore_index=True)
    joint["trial"] = range(len(joint))
    return joint


def pareto_info(frame, cost: str | None = None) -> ParetoInfo:
    """Front and picks of a trial table (pandas) with tokens_per_s_per_sequence, the cost column
    (`cost`: j_per_token by default, or usd_per_mtoken) and feasible.

    knee: the front point farthest from the line joining its two ends, in objectives scaled to [0, 1].
    """
    objective = cost_objective(cost)
    tps = frame[SPEED].to_numpy(dtype=float)
    jpt = frame[objective.column].to_numpy(dtype=float)
    feasible = frame["feasible"].to_numpy(dtype=bool)
    group = np.array([placement_label(d, v, s) for d, v, s in zip(frame["draft_device"], frame["verify_device"],
                                                                   frame["schedule"])])
    if "drafter" in frame:  # a search over drafters (search --drafter): which drafter, then where
        group = np.array([f"{name}: {where}" for name, where in zip(frame["drafter"], group)])
    idx = np.flatnonzero(feasible)
    if len(idx) == 0:
        return ParetoInfo(tps, jpt, objective, group, feasible, np.array([], dtype=int), {})
    front = idx[pareto_mask(np.stack([tps[idx], jpt[idx]], axis=1))]
    front = front[np.argsort(-tps[front])]
    picks = {"max-throughput": int(front[0]), objective.pick: int(front[-1])}
    x = (tps[front] - tps[front].min()) / max(np.ptp(tps[front]), 1e-12)
    y = (jpt[front] - jpt[front].min()) / max(np.ptp(jpt[front]), 1e-12)
    # distance of each front point from the line through (x0, y0) and (x1, y1)
    x0, y0, x1, y1 = x[0], y[0], x[-1], y[-1]
    distance = np.abs((y1 - y0) * x - (x1 - x0) * y + x1 * y0 - y1 * x0)
    picks["knee"] = int(front[int(np.argmax(distance))])
    return ParetoInfo(tps, jpt, objective, group, feasible, front, picks)
