"""Speed of the serving simulator (dfvg_dse.serving): CPU seconds to simulate one minute of traffic,
and requests simulated per CPU second (issue 20's target: one minute of traffic in <= 1 s).

Run: python benchmarks/serving_speed.py [--repeats 5]
Designs: Llama-3.1-8B autoregressive on one H100 SXM (vLLM profile), DFVG's split (Qwen3-8B verified on
an RTX 4090, Qwen3-0.6B drafting a chain of 6 on a V80, overlap + fill) and the same drafter
co-located on the RTX 4090; ShareGPT lengths (models/workloads/sharegpt-vllm.toml), Poisson arrivals
for 60 s at a low, a middle and an overloading rate, max batch 256, chunked prefill of 2,048 tokens.
The iteration table (serving.costs, built once per design and reused across rates) is timed apart.
CPU time (time.process_time, one thread), the median over repeats (the machine is shared and noisy).
Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import time

from dfvg_dse.catalog import Catalog
from dfvg_dse.serving import design_costs, serve
from dfvg_dse.specs import DecodeConfig, SystemSpec
from dfvg_dse.specs.serving import BatchingSpec, LoadSpec
from dfvg_dse.tree import parse_tree_spec

DURATION_S = 60.0


def designs(catalog: Catalog) -> dict:
    vllm, trt = catalog.with_engine("vllm"), catalog.with_engine("trtllm")
    h100, gpu, fpga = vllm.device("h100-sxm"), trt.device("rtx-4090"), trt.device("v80")
    pair = dict(draft=trt.model("qwen3-0.6b"), acceptance=trt.pair_profile("qwen3-8b", "qwen3-0.6b"),
                tree=parse_tree_spec("chain:6"))
    return {
        "ar llama-3.1-8b h100-sxm": (DecodeConfig(vllm.model("llama-3.1-8b"), SystemSpec(h100, h100), schedule="ar"),
                                     (2.0, 10.0, 40.0)),
        "dfvg qwen3-8b rtx-4090 + v80": (DecodeConfig(trt.model("qwen3-8b"), SystemSpec(fpga, gpu, trt.link(fpga.host_link)),
                                                      schedule="overlap", gpu_fill=True, **pair), (0.5, 2.0, 8.0)),
        "colocated qwen3-8b rtx-4090": (DecodeConfig(trt.model("qwen3-8b"), SystemSpec(gpu, gpu), **pair),
                                        (0.5, 2.0, 8.0)),
    }


def cpu_s(call, repeats: int):
    times, result = [], None
    for _ in range(repeats):
        start = time.process_time()
        result = call()
        times.append(time.process_time() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    catalog = Catalog.open()
    workload, batching = catalog.workload("sharegpt-vllm"), BatchingSpec(max_batch=256, chunk_tokens=2048)
    print(f"{'design':32} {'rate':>5} {'requests':>8} {'iterations':>10} {'CPU s / 60 s':>12} {'requests/CPU s':>14}")
    for name, (config, rates) in designs(catalog).items():
        table_s, costs = cpu_s(lambda: design_costs(config, workload, batching), args.repeats)
        for rate in rates:
            load = LoadSpec(rate, DURATION_S, seed=0)
            run_s, result = cpu_s(lambda: serve(config, costs, workload, load, batching), args.repeats)
            n = result.metrics.requests
            print(f"{name:32} {rate:5g} {n:8d} {result.outcome.decode_iterations:10d} {run_s:12.3f} {n / run_s:14.0f}")
        print(f"{name:32} iteration table: {table_s:.3f} CPU s (once per design)")


if __name__ == "__main__":
    main()
