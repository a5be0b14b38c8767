"""Presets: the DFVG paper's setting (RTX 4090 + Alveo V80 over PCIe Gen4 x16, Table 3's pairs)
and the numbers it reports, kept beside the setting so the comparison names its source."""

from __future__ import annotations

# DFVG (ASPLOS 2026): Table 3 pairs; speedups 2.44x (Vicuna-7B) to 3.26x (Qwen3-8B) over AR; energy
# efficiency 4.33x to 5.79x; ablation on Qwen3-8B 2.21 -> 2.46 -> 3.08 -> 3.26; communication 1.08-3.2%.
DFVG_PAPER = {
    "gpu": "rtx-4090", "fpga": "v80", "cpu": "xeon-silver-4310", "fpga_link": "pcie-gen4-x16-host-staged",
    "cpu_link": "pcie-gen4-x16-host-staged", "gpu_link": "pcie-gen4-x16-p2p", "context": 512, "batch": 1,
    "target_dtype": "float16", "draft_dtype": "bfloat16",
    "pairs": [("vicuna-7b", "vicuna-160m"), ("llama-2-7b", "llama-160m"), ("opt-13b", "opt-125m"),
              ("qwen3-8b", "qwen3-0.6b")],
    "paper": {
        "speedup_range": (2.44, 3.26), "speedup": {"vicuna-7b": 2.44, "qwen3-8b": 3.26},
        "energy_efficiency_range": (4.33, 5.79),
        "ablation": {"hw-branch": 2.21, "+treesort": 2.46, "+multicore": 3.08, "+overlap": 3.26},
        "ablation_target": "qwen3-8b",  # the ablation's pair, Qwen3-8B / Qwen3-0.6B
        "communication_share_range": (0.0108, 0.032),
        "baselines": {"specinfer": 2.40, "duodecoding": 1.67, "dovetail": 1.43},
        "source": "DFVG (Lu et al., ASPLOS 2026): abstract, Sec. 6 evaluation, ablation and Table 3",
    },
}
PRESETS = {"dfvg-paper": DFVG_PAPER}
