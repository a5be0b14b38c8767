"""A stage spread over several identical devices (issue 17): tensor, pipeline and expert parallelism.

`ParallelGroup` names the unit device, the degrees and the link between the devices. Expert
parallelism spreads a mixture of experts' routed experts, whole, over the tensor-parallel GPUs of
each pipeline stage (vLLM's --enable-expert-parallel and SGLang's --ep-size with attention tensor
parallel), so its degree is 1 or the tensor degree. The group is
itself a `DeviceSpec` (`group_device`): its name (`4xh100-sxm`, `4xh100-sxm-ep4`), memory, power and price are the
group's totals, so energy, $/token and memory checks read it like any device, while forward costs
shard the model over `unit` and add the collectives (costs/parallel.py, docs/cost-model.md).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from dfvg_dse.specs.hardware import DeviceSpec, LinkSpec, MemoryTier, SpecError

MAX_DEVICES = 64
# `8xh100-sxm-pp2-ep4`: devices x unit, then pipeline and expert degrees in either order
GROUP_NAME_RE = re.compile(r"^([1-9][0-9]?)x([a-z0-9][a-z0-9._-]*?)((?:-(?:pp|ep)[1-9][0-9]?){0,2})$")
DEGREE_RE = re.compile(r"-(pp|ep)([1-9][0-9]?)")


@dataclass(frozen=True)
class ParallelGroup:
    """`tensor` x `pipeline` copies of `unit`, joined by `link` (GPU to GPU); the routed experts of a
    mixture of experts spread whole over `expert` of them (1, or the tensor degree). FPGAs group one
    way only: `tensor` FPGAs each hold the whole draft and take a share of each level's branches
    (costs/fpga_draft.py); they need no link between them."""

    unit: DeviceSpec
    tensor: int = 1
    pipeline: int = 1
    link: LinkSpec | None = None
    expert: int = 1

    def __post_init__(self) -> None:
        for name in ("tensor", "pipeline", "expert"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEVICES:
                raise SpecError(f"{name}_parallel", value, f"an integer in 1..{MAX_DEVICES}")
        if self.expert not in (1, self.tensor):
            raise SpecError("expert_parallel", self.expert, f"must be 1 or the tensor-parallel degree ({self.tensor}): "
                            "the experts spread over the tensor-parallel GPUs (vLLM --enable-expert-parallel, "
                            "SGLang --ep-size)")
        if self.devices > MAX_DEVICES:
            raise SpecError("devices", self.devices, f"tensor x pipeline must be <= {MAX_DEVICES}")
        if self.unit.kind == "cpu":
            raise SpecError("device", self.unit.name, "parallel stages span GPUs or FPGAs (a CPU stage is one device)")
        if self.unit.kind == "fpga" and (self.pipeline, self.expert) != (1, 1):
            raise SpecError("device", self.unit.name, f"FPGAs group only side by side, the branches spread over them "
                            f"({self.devices}x{self.unit.name}): splitting the layers over FPGAs (a pipeline degree) "
                            "is not modelled yet, and an expert degree does not apply")
        if self.unit.parallel is not None:
            raise SpecError("device", self.unit.name, "is already a group; give the single device")
        if self.devices > 1 and self.link is None and self.unit.kind == "gpu":
            raise SpecError("peer_link", None, f"{self.unit.name} names no peer_link between its devices")

    @property
    def devices(self) -> int:
        return self.tensor * self.pipeline


def implied_tensor(tensor: int, expert: int) -> int:
    """The tensor degree: an expert degree alone implies the same one (experts spread over TP GPUs)."""
    return expert if tensor == 1 else tensor


def group_name(unit: str, tensor: int = 1, pipeline: int = 1, expert: int = 1) -> str:
    """`4xh100-sxm` (tensor parallel), `8xh100-sxm-pp2` (TP 4 x PP 2), `4xh100-sxm-ep4` (TP 4, experts
    over the 4); the unit's own name at 1 x 1. An expert degree alone implies the same tensor degree."""
    tensor = implied_tensor(tensor, expert)
    if (tensor, pipeline) == (1, 1):
        return unit
    return (f"{tensor * pipeline}x{unit}" + (f"-pp{pipeline}" if pipeline > 1 else "")
            + (f"-ep{expert}" if expert > 1 else ""))


def parse_group_name(name: str) -> tuple[str, int, int, int] | None:
    """(unit, tensor, pipeline, expert) of a group name (`4xh100-sxm`, `8xh100-sxm-pp2`,
    `4xh100-sxm-ep4`); None otherwise."""
    match = GROUP_NAME_RE.match(name)
    if match is None:
        return None
    degrees = DEGREE_RE.findall(match.group(3))
    if len({kind for kind, _ in degrees}) < len(degrees):
        return None  # the same degree twice
    given = {kind: int(value) for kind, value in degrees}
    devices, pipeline, expert = int(match.group(1)), given.get("pp", 1), given.get("ep", 1)
    if devices % pipeline:
        raise SpecError("device", name, f"{devices} devices do not split into {pipeline} pipeline stages")
    return match.group(2), devices // pipeline, pipeline, expert


def _scaled_tier(tier: MemoryTier, count: int) -> MemoryTier:
    return dataclasses.replace(tier, capacity_bytes=tier.capacity_bytes * count,
                               bandwidth_bytes_per_s=tier.bandwidth_bytes_per_s * count)


def group_device(unit: DeviceSpec, tensor: int = 1, pipeline: int = 1, link: LinkSpec | None = None,
                 expert: int = 1) -> DeviceSpec:
    """The group as one device: totals of memory, peaks, power and price; `unit` itself at 1 x 1."""
    group = ParallelGroup(unit, tensor, pipeline, link, expert)
    if group.devices == 1:
        return unit
    n = group.devices
    price = unit.price_usd_per_s * n if unit.price_usd_per_s is not None else None
    degrees = f"TP {tensor}" + (f", PP {pipeline}" if pipeline > 1 else "") + (f", EP {expert}" if expert > 1 else "")
    fabric = unit.fpga
    if fabric is not None:  # side by side: n times the PEs and branch lanes; each keeps its own SRAM
        degrees = "branches spread"
        fabric = dataclasses.replace(fabric, dsp_count=fabric.dsp_count * n, pe_dsp_count=fabric.pe_dsp_count * n,
                                     branch_lanes=fabric.branch_lanes * n)
    return dataclasses.replace(
        unit, name=group_name(unit.name, tensor, pipeline, expert), fpga=fabric,
        display_name=f"{n} x {unit.display_name or unit.name} ({degrees})",
        peak_flops_per_s=tuple((d, p * n) for d, p in unit.peak_flops_per_s),
        memory=tuple(_scaled_tier(t, n) for t in unit.memory), tdp_w=unit.tdp_w * n,
        decode_power_w=unit.decode_power_w * n, idle_power_w=unit.idle_power_w * n, price_usd_per_s=price,
        fp16_accumulate_peak_flops_per_s=(unit.fp16_accumulate_peak_flops_per_s * n
                                          if unit.fp16_accumulate_peak_flops_per_s else None),
        parallel=group)


def unit_of(device: DeviceSpec) -> DeviceSpec:
    """The single device a forward runs on: the group's unit, under the group's engine profile; an
    FPGA's with its share of the group's fabric (a search may have changed the PE share or clock)."""
    group = device.parallel
    if group is None:
        return device
    if device.fpga is not None:
        n, f = group.devices, device.fpga
        fabric = dataclasses.replace(f, dsp_count=f.dsp_count // n, pe_dsp_count=max(1, f.pe_dsp_count // n),
                                     branch_lanes=max(1, f.branch_lanes // n))
        return dataclasses.replace(group.unit, fpga=fabric, eta_compute=device.eta_compute,
                                   peak_flops_per_s=tuple((d, p / n) for d, p in device.peak_flops_per_s))
    return dataclasses.replace(group.unit, engine=device.engine)


def colocated_draft_device(verify: DeviceSpec, draft: DeviceSpec) -> DeviceSpec:
    """The draft's own degrees (`draft`: the verifier's unit or a smaller group of it) on the verify
    GPUs: named as the verifier, so the two stages share the devices (one runs while the other waits;
    vLLM's draft_tensor_parallel_size, SGLang's draft at TP 1)."""
    unit = verify.parallel.unit if verify.parallel is not None else verify
    draft_unit = draft.parallel.unit if draft.parallel is not None else draft
    count = draft.parallel.devices if draft.parallel is not None else 1
    have = verify.parallel.devices if verify.parallel is not None else 1
    if draft_unit.name != unit.name or count > have:
        raise SpecError("draft_tensor_parallel", count, f"the draft shares {verify.name}: at most {have} of its {unit.name}")
    return dataclasses.replace(draft, name=verify.name,
                               display_name=f"{verify.display_name or verify.name}; the draft on {count} of them")
