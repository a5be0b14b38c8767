"""Closed form against the discrete-event simulator on the cross-check cases; prints a Markdown table.

Run: python benchmarks/sim_vs_closed_form.py  (about 30 s; the same cases as tests/pipeline/test_sim.py)
"""

from __future__ import annotations

from dfvg_dse.catalog import Catalog
from dfvg_dse.pipeline import estimate
from dfvg_dse.pipeline.crosscheck import CASES, build_case
from dfvg_dse.sim import simulate


def main() -> None:
    c = Catalog.open()
    parts = dict(target=c.model("qwen3-8b"), draft=c.model("qwen3-0.6b").with_dtypes("bfloat16", "bfloat16"),
                 gpu=c.device("rtx-4090"), fpga=c.device("v80"), cpu=c.device("xeon-silver-4310"),
                 h100=c.device("h100-sxm"), staged=c.link("pcie-gen4-x16-host-staged"), p2p=c.link("pcie-gen4-x16-p2p"),
                 profile=c.acceptance("pair:qwen3-8b/qwen3-0.6b"), sync=c.defaults().sync_per_round_s)
    print("| case | schedule | closed form tok/s | simulated tok/s | error | J/token error | time/token p50 / p99 (ms) |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for case in CASES:
        config = build_case(case, parts)
        dynamic = config.dynamic is not None
        closed = estimate(config, rounds=20000 if dynamic else 1)
        sim = simulate(config, rounds=20000 if dynamic else 50000, seed=1)
        err = sim.tokens_per_s / closed.tokens_per_s - 1
        j_err = sim.j_per_token / closed.energy.j_per_token - 1
        worst = max(worst, abs(err), abs(j_err))
        print(f"| {case[0]} | {config.schedule}{' + fill' if config.gpu_fill else ''} | {closed.tokens_per_s:.2f} | "
              f"{sim.tokens_per_s:.2f} | {100 * err:+.2f}% | {100 * j_err:+.2f}% | "
              f"{sim.p50_time_per_token_s * 1e3:.2f} / {sim.p99_time_per_token_s * 1e3:.2f} |")
    print(f"\nworst |error|: {100 * worst:.2f}%")


if __name__ == "__main__":
    main()
