"""The configurations on which the closed forms are checked against the simulator (tests and docs)."""

from __future__ import annotations

from dfvg_dse.specs import AdaptRule, DecodeConfig, DuoRule, Eagle2Rule, SystemSpec
from dfvg_dse.tree import parse_tree_spec

# (label, draft device key, verify device key, link key, schedule, tree SPEC or rule, extra options)
CASES = [
    ("AR, RTX 4090", "gpu", "gpu", None, "ar", None, {}),
    ("AR, H100", "h100", "h100", None, "ar", None, {}),
    ("SpS chain:2, one GPU", "gpu", "gpu", None, "sequential", "chain:2", {}),
    ("SpS chain:6, one GPU", "gpu", "gpu", None, "sequential", "chain:6", {}),
    ("tree kary:2x3, one GPU", "gpu", "gpu", None, "sequential", "kary:2x3", {}),
    ("tree seq:4x3, one GPU, sparse mask", "gpu", "gpu", None, "sequential", "seq:4x3", {"attention_efficiency": 0.5}),
    ("chain:4, one H100", "h100", "h100", None, "sequential", "chain:4", {}),
    ("FPGA chain:5, staged PCIe", "fpga", "gpu", "staged", "sequential", "chain:5", {}),
    ("FPGA kary:3x2, staged PCIe", "fpga", "gpu", "staged", "sequential", "kary:3x2", {}),
    ("FPGA seq:2x6, P2P PCIe", "fpga", "gpu", "p2p", "sequential", "seq:2x6", {}),
    ("FPGA chain:4, batch 4", "fpga", "gpu", "staged", "sequential", "chain:4", {"batch": 4}),
    ("CPU chain:3 -> GPU", "cpu", "gpu", "staged", "sequential", "chain:3", {}),
    ("GPU chain:2 -> CPU (Dovetail)", "gpu", "cpu", "staged", "sequential", "chain:2", {}),
    ("FPGA chain:4, stochastic (Q shipped)", "fpga", "gpu", "staged", "sequential", "chain:4", {"send_draft_probs": True}),
    ("overlap FPGA chain:4", "fpga", "gpu", "staged", "overlap", "chain:4", {}),
    ("overlap FPGA chain:8", "fpga", "gpu", "staged", "overlap", "chain:8", {}),
    ("overlap FPGA kary:2x3", "fpga", "gpu", "staged", "overlap", "kary:2x3", {}),
    ("overlap FPGA chain:4, batch 4", "fpga", "gpu", "staged", "overlap", "chain:4", {"batch": 4}),
    ("overlap + GPU fill, chain:6", "fpga", "gpu", "staged", "overlap", "chain:6", {"gpu_fill": True}),
    ("overlap + GPU fill, seq:3x4", "fpga", "gpu", "staged", "overlap", "seq:3x4", {"gpu_fill": True}),
    ("overlap, second GPU chain:5 (AMUSD)", "h100", "gpu", "p2p", "overlap", "chain:5", {}),
    ("overlap CPU chain:3 -> GPU", "cpu", "gpu", "staged", "overlap", "chain:3", {}),
    ("ADAPT sequential (dynamic)", "fpga", "gpu", "staged", "sequential", AdaptRule(0.05, 0.0, 16, 64, 8, 16), {}),
    ("ADAPT overlap + fill (DFVG, dynamic)", "fpga", "gpu", "staged", "overlap", AdaptRule(0.05, 0.0, 16, 64, 8, 16),
     {"gpu_fill": True}),
    ("EAGLE-2 one GPU (dynamic)", "gpu", "gpu", None, "sequential", Eagle2Rule(8, 6, 48), {}),
    ("DuoDecoding CPU overlap (dynamic)", "cpu", "gpu", "staged", "overlap", DuoRule(16), {}),
]


def build_case(case, parts: dict) -> DecodeConfig:
    """A DecodeConfig from a CASES row and a dict of models, devices, links, profile and sync."""
    label, draft, verify, link, schedule, shape, extra = case
    system = SystemSpec(parts[draft], parts[verify], parts[link] if link else None)
    if schedule == "ar":
        return DecodeConfig(parts["target"], system, schedule="ar", name=label)
    shape_kw = {"tree": parse_tree_spec(shape)} if isinstance(shape, str) else {"dynamic": shape}
    return DecodeConfig(parts["target"], system, parts["draft"], parts["profile"], schedule=schedule,
                        sync_s=parts["sync"], name=label, **shape_kw, **extra)
