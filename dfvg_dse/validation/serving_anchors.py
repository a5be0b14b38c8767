"""Published serving measurements with and without speculation against the serving simulator
(issue 20, "Checked"; docs/serving.md, "Against a published serving measurement").

A `serving` row (hwdb/measurements, docs/measurements.md) gives a speedup of speculative decoding in a
serving engine: the throughput (generated tokens per second) of a batch of requests served with
speculation over the same batch served without. The row's requests are served here as its source
served them: `requests` requests spread evenly over the row's workload trace, each `batch` times at
once (SpecDecode-Bench: one prompt repeated `batch` times per `LLM.generate`), all arriving at once,
continuous batching capped at `batch`. Acceptance is the published mean accepted tokens per round
(`acceptance from-tau`: the i.i.d. alpha of the row's chain, or geometric ranks on its tree); costs
are the engine's fitted profile. Nothing is fitted to these rows: they are out-of-sample checks.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dfvg_dse.serving import Requests, design_costs, run
from dfvg_dse.specs import DecodeConfig, DeviceSpec, ModelSpec, SystemSpec
from dfvg_dse.specs.engines import EngineProfile
from dfvg_dse.specs.measurements import ServingResult
from dfvg_dse.specs.serving import LengthDistribution, Workload, engine_batching
from dfvg_dse.tree import chain
from dfvg_dse.tree.from_tau import is_chain, profile_from_tau
from dfvg_dse.tree.optimal import optimal_tree
from dfvg_dse.validation.fidelity import Inputs, priced_rows, row_drafter, row_target

SEED = 0


def served_subset(workload: Workload, requests: int) -> Workload:
    """`requests` requests of a paired trace, spread evenly over it (the first and the last included)."""
    prompts, outputs = np.asarray(workload.prompt.values), np.asarray(workload.output.values)
    at = np.unique(np.rint(np.linspace(0, len(prompts) - 1, min(requests, len(prompts)))).astype(int))
    lengths = [tuple(int(v) for v in values[at]) for values in (prompts, outputs)]
    return Workload(f"{workload.name}[{len(at)}]", *(LengthDistribution("empirical", float(np.mean(v)), values=v)
                                                     for v in lengths), workload.source, paired=True)


def batched_requests(subset: Workload, copies: int) -> Requests:
    """Each request of `subset` `copies` times in a row, all arriving at time 0."""
    prompts = np.repeat(np.asarray(subset.prompt.values, dtype=np.int64), copies)
    outputs = np.repeat(np.asarray(subset.output.values, dtype=np.int64), copies)
    return Requests(np.zeros(len(prompts)), prompts, outputs)


def row_designs(row: ServingResult, target: ModelSpec, draft: ModelSpec | None, device: DeviceSpec,
                draft_device: DeviceSpec) -> tuple[DecodeConfig, DecodeConfig]:
    """(speculative, autoregressive) designs of a row: the drafter co-located on the row's GPU (its
    drafting priced under `draft_device`'s engine profile), the tree the row names, the acceptance
    that reproduces its published tau at that tree."""
    target = row_target(row, target)
    drafter = row_drafter(row, target, draft)  # never a lookup: the reader refuses them on serving rows
    profile = profile_from_tau(f"{row.source}: {row.where}", row.mean_accepted_tokens, row.tree_tokens,
                               row.tree_depth, row.where)
    tree = (chain(row.tree_depth) if is_chain(row.tree_tokens, row.tree_depth)
            else optimal_tree(profile, row.tree_tokens, row.tree_depth).tree)
    speculative = DecodeConfig(target, SystemSpec(draft_device, device), drafter, profile, tree=tree,
                               schedule="sequential", name="speculative")
    ar = dataclasses.replace(speculative, system=SystemSpec(device, device), draft=None, acceptance=None, tree=None,
                             schedule="ar", name="ar")
    return speculative, ar


def served_throughput(config: DecodeConfig, subset: Workload, copies: int) -> float:
    """Generated tokens per second of `subset`'s requests, each `copies` times, served by `config`
    with at most `copies` sequences at once (the engine's chunked-prefill budget otherwise)."""
    batching = engine_batching(config.system.verify, max_batch=copies)
    requests = batched_requests(subset, copies)
    outcome = run(config, design_costs(config, subset, batching, SEED), requests, batching, SEED)
    return float(requests.output_tokens.sum()) / outcome.end_s


def serving_prediction(row: ServingResult, target: ModelSpec, draft: ModelSpec | None, device: DeviceSpec,
                       workload: Workload, draft_device: DeviceSpec | None = None) -> dict:
    """The row's predicted speedup and both designs' throughputs (tokens/s)."""
    speculative, ar = row_designs(row, target, draft, device, draft_device or device)
    subset = served_subset(workload, row.requests)
    spec_tps, ar_tps = (served_throughput(c, subset, row.batch) for c in (speculative, ar))
    return {"predicted_speedup": spec_tps / ar_tps, "speculative_tokens_per_s": spec_tps, "ar_tokens_per_s": ar_tps,
            "alpha": speculative.acceptance.rank_probs[0], "requests_served": len(subset.prompt.values) * row.batch}


def serving_report(inputs: Inputs, profiles: dict[str, EngineProfile], workloads: dict[str, Workload]) -> list[dict]:
    """Every published serving row against its prediction (fidelity.priced_rows). `workloads` by name."""
    records = []
    for p in priced_rows(inputs, profiles, "serving"):
        predicted = serving_prediction(p.row, inputs.models[p.row.target], p.draft, p.device,
                                       workloads[p.row.workload], p.draft_device)
        records.append({**p.record, "workload": p.row.workload, **predicted,
                        "error": predicted["predicted_speedup"] / p.row.speedup - 1.0})
    return records
