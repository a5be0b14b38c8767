"""Named scenarios (docs/pipeline.md, "Scenarios and the DFVG paper preset"): one cost model,
different placement, tree and schedule.

ar           target alone on the GPU
sps          chain drafting on the same GPU, sequential (Leviathan; the best chain length)
specinfer    a static tree on the same GPU, sequential, sparse tree mask (the round-time-optimal tree)
duodecoding  draft on the host CPU, verify on the GPU, overlapped, DuoDecoding's k sequences
dovetail     draft on the GPU, verify on the CPU, sequential chain
amusd        draft on a second GPU, verify on the first, overlapped chain (AMUSD / SwiftSpec style)
dfvg         draft on the FPGA, verify on the GPU: ADAPT dynamic tree, TreeSort-Verify, overlap and
             the GPU decoding forward while it waits
DFVG's ablation (its Table/Fig. of Qwen3-8B: 2.21x -> 2.46x -> 3.08x -> 3.26x) is rebuilt as:
hw-branch (ADAPT on one FPGA core, sequential, sparse tree mask) -> +treesort (dense blocks) ->
+multicore (all FPGA cores) -> +overlap.

Choices where the papers are silent (documented in docs/pipeline.md): a sparse tree mask runs
attention at `SPARSE_MASK_EFFICIENCY` of the dense rate; DFVG's FPGA has `FPGA_CORES` cores (a
single core has 1/cores of the DSPs and lanes); ADAPT uses tau = 0.05, T = 0, k_max = min(16, lanes),
budget 64 and D_min = ceil(T_verify / T_draft_step).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from dfvg_dse.pipeline.estimate import Estimate, estimate
from dfvg_dse.specs import (AcceptanceProfile, AdaptRule, DecodeConfig, DeviceSpec, DuoRule, LinkSpec, ModelSpec,
                            SystemSpec, draft_depth_cap)
from dfvg_dse.specs.decoding import LOOKUP_HOST
from dfvg_dse.tree import best_tree_for_round_time, chain
from dfvg_dse.costs import device_forward_cost, tree_verify_cost

SPARSE_MASK_EFFICIENCY = 0.5  # assumed: tree attention with a sparse mask vs TreeSort's dense blocks
FPGA_CORES = 4  # assumed: DFVG's "multi-core" overlay (MCoreOPU, from the same group, has 4 cores)
ADAPT_DEFAULTS = dict(threshold=0.05, temperature=0.0, budget=64, max_depth=16)
SCENARIOS = ("ar", "sps", "specinfer", "duodecoding", "dovetail", "amusd", "dfvg")
ABLATION = ("hw-branch", "+treesort", "+multicore", "+overlap")
ON_THE_TARGETS_GPU = ("sps", "specinfer")  # the scenarios that draft where the target verifies


@dataclass(frozen=True)
class Setup:
    """Models, devices and links that the scenarios place the stages on."""

    target: ModelSpec
    draft: ModelSpec
    acceptance: AcceptanceProfile
    gpu: DeviceSpec
    fpga: DeviceSpec
    cpu: DeviceSpec
    fpga_link: LinkSpec
    cpu_link: LinkSpec
    gpu_link: LinkSpec  # between two GPUs (amusd)
    second_gpu: DeviceSpec | None = None  # default: another `gpu`
    batch: int = 1
    context: int = 512
    sync_s: float = 0.0

    def config(self, name: str, draft: DeviceSpec, verify: DeviceSpec, link: LinkSpec | None, **kw) -> DecodeConfig:
        same = draft.name == verify.name
        return DecodeConfig(self.target, SystemSpec(draft, verify, None if same else link), self.draft,
                            self.acceptance, batch=self.batch, context=self.context, sync_s=self.sync_s,
                            name=name, **kw)


def _best(configs: list[DecodeConfig], baseline: float, rounds: int) -> Estimate:
    """The feasible config with the highest tokens/s (the first infeasible one if none is feasible)."""
    results = [estimate(c, baseline, rounds) for c in configs]
    feasible = [r for r in results if r.feasible]
    return max(feasible, key=lambda r: r.tokens_per_s) if feasible else results[0]


def _chains(setup: Setup, name: str, draft, verify, link, schedule: str, baseline: float, rounds: int) -> Estimate:
    return _best([setup.config(name, draft, verify, link, tree=chain(g), schedule=schedule)
                  for g in range(1, draft_depth_cap(setup.draft, 12) + 1)], baseline, rounds)


def _best_tree(setup: Setup, cfg: DecodeConfig, baseline: float, rounds: int) -> Estimate:
    """`cfg` with the static tree (up to 32 nodes, 8 levels) of the highest tokens/s."""
    best = best_tree_for_round_time(setup.acceptance, lambda t: estimate(
        dataclasses.replace(cfg, tree=t), baseline, rounds).round_time_s or math.inf, 32, draft_depth_cap(setup.draft, 8),
        1 if setup.draft.drafts_by_lookup else None)  # a lookup proposes one continuation: chains
    return estimate(dataclasses.replace(cfg, tree=best.tree), baseline, rounds)


def _dynamic(setup: Setup, name: str, draft, verify, link, rule, baseline: float, rounds: int, **kw) -> Estimate:
    """A placement with a dynamic rule; a drafter that drafts a round in one forward (Medusa) has no
    levels to steer, so it takes its best static tree there."""
    if setup.draft is not None and setup.draft.drafts_in_one_pass:
        return _best_tree(setup, setup.config(name, draft, verify, link, tree=chain(1), **kw), baseline, rounds)
    return estimate(setup.config(name, draft, verify, link, dynamic=rule, **kw), baseline, rounds)


def _second_gpu(setup: Setup) -> DeviceSpec:
    other = setup.second_gpu or setup.gpu
    return dataclasses.replace(other, name=f"{other.name}#2") if other.name == setup.gpu.name else other


def _fpga_cores(fpga: DeviceSpec, cores: int) -> DeviceSpec:
    """One of `cores` cores of an FPGA overlay: its share of the PE DSPs and of the branch lanes."""
    f = fpga.fpga
    one = dataclasses.replace(f, pe_dsp_count=max(1, f.pe_dsp_count // cores), branch_lanes=max(1, f.branch_lanes // cores))
    peaks = tuple((d, p / cores) for d, p in fpga.peak_flops_per_s)
    return dataclasses.replace(fpga, fpga=one, peak_flops_per_s=peaks)


def adapt_rule(setup: Setup, drafter: DeviceSpec, tree_mask_efficiency: float = 1.0) -> AdaptRule:
    """ADAPT with k_max from the lanes (16 off an FPGA) and D_min = ceil(T_verify / T_draft_step)."""
    k_max = min(16, drafter.fpga.branch_lanes) if drafter.fpga is not None else 16
    step = float(device_forward_cost(setup.draft, drafter, k_max, setup.context, setup.batch).time_s)
    verify = float(tree_verify_cost(setup.target, setup.gpu, ADAPT_DEFAULTS["budget"], None, setup.context,
                                    setup.batch, tree_mask_efficiency).time_s)
    d_min = min(ADAPT_DEFAULTS["max_depth"], max(1, math.ceil(verify / step - 1e-9)))
    return AdaptRule(ADAPT_DEFAULTS["threshold"], ADAPT_DEFAULTS["temperature"], k_max, ADAPT_DEFAULTS["budget"],
                     d_min, ADAPT_DEFAULTS["max_depth"])


def scenario(setup: Setup, name: str, baseline: float | None = None, rounds: int = 20000) -> Estimate:
    """Evaluate one named scenario or ablation step."""
    gpu, fpga = setup.gpu, setup.fpga
    # a draft head cannot draft while its features are being verified (specs/decoding.py, HEAD_OVERLAP): its
    # overlapped placements run in turn
    overlap = "sequential" if setup.draft is not None and setup.draft.head_kind else "overlap"
    if name == "ar":
        return estimate(setup.config("ar", gpu, gpu, None, schedule="ar"), baseline, rounds)
    if setup.draft is not None and setup.draft.drafts_by_lookup and name not in ON_THE_TARGETS_GPU:
        return Estimate(name, "sequential", False, LOOKUP_HOST)
    if name == "sps":
        return _chains(setup, name, gpu, gpu, None, "sequential", baseline, rounds)
    if name == "specinfer":
        cfg = setup.config(name, gpu, gpu, None, tree=chain(1), attention_efficiency=SPARSE_MASK_EFFICIENCY)
        return _best_tree(setup, cfg, baseline, rounds)
    if name == "duodecoding":
        if setup.draft is not None and setup.draft.drafts_in_one_pass:
            return _dynamic(setup, name, setup.cpu, gpu, setup.cpu_link, None, baseline, rounds, schedule=overlap)
        return _best([setup.config(name, setup.cpu, gpu, setup.cpu_link, dynamic=DuoRule(g), schedule=overlap)
                      for g in (12, 16, 24)], baseline, rounds)
    if name == "dovetail":
        return _chains(setup, name, gpu, setup.cpu, setup.cpu_link, "sequential", baseline, rounds)
    if name == "amusd":
        return _chains(setup, name, _second_gpu(setup), gpu, setup.gpu_link, overlap, baseline, rounds)
    if name in ("dfvg", "+overlap"):
        return _dynamic(setup, name, fpga, gpu, setup.fpga_link, adapt_rule(setup, fpga), baseline, rounds,
                        schedule=overlap, gpu_fill=overlap == "overlap")
    if name == "+multicore":
        return _dynamic(setup, name, fpga, gpu, setup.fpga_link, adapt_rule(setup, fpga), baseline, rounds)
    if name in ("hw-branch", "+treesort"):
        core = _fpga_cores(fpga, FPGA_CORES)
        efficiency = SPARSE_MASK_EFFICIENCY if name == "hw-branch" else 1.0
        return _dynamic(setup, name, core, gpu, setup.fpga_link, adapt_rule(setup, core, efficiency), baseline,
                        rounds, attention_efficiency=efficiency)
    raise ValueError(f"unknown scenario {name!r}")


PLACEMENTS = ("sps", "amusd", "dfvg")  # a drafter on the target's GPU, on a second GPU, on the FPGA


def placements(setup: Setup, rounds: int = 20000) -> dict[str, Estimate]:
    """AR and the setup's drafter in each placement (issue 18: which drafter on which device wins)."""
    return compare(setup, rounds, PLACEMENTS)


def compare(setup: Setup, rounds: int = 20000,
            names: tuple[str, ...] = SCENARIOS[1:] + ABLATION) -> dict[str, Estimate]:
    """AR and the named scenarios and ablation steps (default: every one), speedups against AR on the
    setup's GPU."""
    ar = scenario(setup, "ar", None, rounds)
    baseline = ar.tokens_per_s if ar.feasible else None
    return {"ar": ar, **{name: scenario(setup, name, baseline, rounds) for name in names}}
