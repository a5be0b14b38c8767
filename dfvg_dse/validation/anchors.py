"""Published anchors (issue 7, `validate --anchors`): the analytical model against measurements
others published, each with its source and a stated tolerance."""

from __future__ import annotations

from dfvg_dse.costs.forward import device_forward_cost
from dfvg_dse.costs.stages import tree_draft_time_s, tree_verify_cost
from dfvg_dse.specs import AcceptanceProfile, DeviceSpec, ModelSpec
from dfvg_dse.tree.optimal import optimal_tree

# Measured batch-1 decode of LLaMA-2-7B in 16-bit (sources per row), about 100 tokens of context.
GPT_FAST = (("a100-80gb", 104.9, "pytorch-labs/gpt-fast README (A100-80GB, power-limited to 330 W)"),
            ("rtx-4090", 65.0, "pytorch-labs/gpt-fast issue #27 (RTX 4090, ~65 tok/s)"),
            ("a10", 1 / 0.027, "InternLM/lmdeploy issue #210 (A10, 27 ms/token)"))
DECODE_TOLERANCE = 0.15
# Sequoia (Chen et al., NeurIPS 2024), Table: A100, Llama2-7B with JackFram/llama-68m on C4, T = 0,
# tree (128 nodes, depth 10): 4.04x over autoregressive at 5.08 tokens per step.
SEQUOIA = {"speedup": 4.04, "tokens_per_step": 5.08, "budget": 128, "depth": 10,
           "source": "Sequoia (NeurIPS 2024) A100 Llama2-7B / JF68M, C4, T=0: 4.04x at 5.08 tokens/step"}
SEQUOIA_TOLERANCE = 0.25
DFVG = {"speedup": 3.26, "source": "DFVG (ASPLOS 2026) abstract: 3.26x for Qwen3-8B / Qwen3-0.6B, RTX 4090 + V80"}
DFVG_TOLERANCE = 0.15


def _row(name: str, quantity: str, predicted: float, published: float, tolerance: float, source: str,
         note: str = "") -> dict:
    error = predicted / published - 1.0
    return {"anchor": name, "quantity": quantity, "predicted": predicted, "published": published, "error": error,
            "tolerance": tolerance, "within": bool(abs(error) <= tolerance), "source": source, "note": note}


def decode_anchors(model: ModelSpec, devices: dict[str, DeviceSpec]) -> list[dict]:
    """gpt-fast-style batch-1 decode speed of LLaMA-2-7B on each device."""
    return [_row(f"gpt-fast {name}", "tokens/s", 1.0 / float(device_forward_cost(model, devices[name], 1, 100).time_s),
                 measured, DECODE_TOLERANCE, source) for name, measured, source in GPT_FAST]


def sequoia_anchor(target: ModelSpec, draft: ModelSpec, device: DeviceSpec, profile: AcceptanceProfile,
                   context: int = 256) -> dict:
    """The cost side of Sequoia's A100 result: with the paper's own tokens per step, the speedup is
    tokens/step x t_AR / (t_draft + t_verify) for a (128, 10) tree, both models on the A100. The
    tree's level widths come from our optimal tree for `profile` (the paper's tree is not printed)."""
    tree = optimal_tree(profile, SEQUOIA["budget"], SEQUOIA["depth"]).tree
    widths = tree.level_widths()
    ar = float(device_forward_cost(target, device, 1, context).time_s)
    verify = float(tree_verify_cost(target, device, len(tree.parents) - 1, None, context).time_s)
    drafting = float(tree_draft_time_s(draft, device, widths, context)[0])
    predicted = SEQUOIA["tokens_per_step"] * ar / (drafting + verify)
    return _row("Sequoia A100", "speedup", predicted, SEQUOIA["speedup"], SEQUOIA_TOLERANCE, SEQUOIA["source"],
                f"tree widths from the optimal tree of profile {profile.name}; acceptance taken from the paper")


def dfvg_anchor(predicted_speedup: float) -> dict:
    return _row("DFVG headline", "speedup", predicted_speedup, DFVG["speedup"], DFVG_TOLERANCE, DFVG["source"],
                "`compare --preset dfvg-paper`, dfvg scenario")
