"""The serving simulator against closed forms: one request at a time reproduces the forward costs
and `estimate`; at max batch 1 it is an M/G/1 queue (Pollaczek-Khinchine); what it conserves."""

import dataclasses
import math

import numpy as np
import pytest

from dfvg_dse.costs import device_forward_cost, processor_forward_cost
from dfvg_dse.pipeline import estimate
from dfvg_dse.serving import design_costs, serve
from dfvg_dse.specs import DecodeConfig, SystemSpec
from dfvg_dse.specs.serving import BatchingSpec, LengthDistribution, LoadSpec, Workload
from dfvg_dse.tree import parse_tree_spec


def _ar(catalog, model="qwen3-8b", device="h100-sxm"):
    cat = catalog.with_engine("trtllm")
    gpu = cat.device(device)
    return DecodeConfig(cat.model(model), SystemSpec(gpu, gpu), schedule="ar", name="ar")


def _dfvg(catalog, tree="chain:6"):
    cat = catalog.with_engine("trtllm")
    gpu, fpga = cat.device("rtx-4090"), cat.device("v80")
    return DecodeConfig(cat.model("qwen3-8b"), SystemSpec(fpga, gpu, cat.link(fpga.host_link)), cat.model("qwen3-0.6b"),
                        cat.pair_profile("qwen3-8b", "qwen3-0.6b"), tree=parse_tree_spec(tree), schedule="overlap",
                        gpu_fill=True, name="dfvg")


def _trace(prompt: int, output: int, count: int, gap_s: float) -> Workload:
    """Requests spaced so far apart that each is served alone."""
    return Workload("spaced", LengthDistribution("empirical", prompt, values=(prompt,) * count),
                    LengthDistribution("empirical", output, values=(output,) * count),
                    arrivals_s=tuple(gap_s * np.arange(count)), paired=True)


def test_one_request_at_a_time_is_a_prefill_then_autoregressive_steps(catalog):
    config, p, o = _ar(catalog), 300, 400
    workload = _trace(p, o, 12, 30.0)
    batching = BatchingSpec(max_batch=8, chunk_tokens=2048)
    result = serve(config, design_costs(config, workload, batching), workload, LoadSpec(1.0), batching)
    m = result.metrics
    prefill = float(processor_forward_cost(config.target, config.system.verify, p, 0, 1).time_s)
    # token j + 1 is decoded over a cache of p + j tokens
    steps = processor_forward_cost(config.target, config.system.verify, 1, p + np.arange(1, o), 1).time_s
    assert m.ttft_s["p50"] == pytest.approx(prefill, rel=1e-9)
    assert m.tpot_s["mean"] == pytest.approx(float(np.mean(steps)), rel=2e-3)  # the context grid's interpolation
    est = estimate(dataclasses.replace(config, context=p + o // 2))
    assert m.tpot_s["mean"] == pytest.approx(1.0 / est.tokens_per_s, rel=5e-3)
    assert m.mean_decode_batch == pytest.approx(1.0)


def test_one_request_at_a_time_reproduces_estimate_for_a_speculative_design(catalog):
    """DFVG's split (V80 drafting, RTX 4090 verifying, overlap + fill) at batch 1: the mean time per
    output token of long requests is the estimate's round time over its tokens per round."""
    config, p, o = _dfvg(catalog), 256, 2000
    workload = _trace(p, o, 40, 60.0)
    batching = BatchingSpec(max_batch=8, chunk_tokens=2048)
    m = serve(config, design_costs(config, workload, batching), workload, LoadSpec(1.0), batching).metrics
    est = estimate(dataclasses.replace(config, context=p + o // 2))
    assert m.speculative_share == 1.0
    assert m.tpot_s["mean"] == pytest.approx(1.0 / est.tokens_per_s, rel=0.02)


def test_chunked_prefill_of_a_long_prompt_alone_is_its_chunks(catalog):
    config, p = _ar(catalog), 5000
    workload = _trace(p, 2, 3, 30.0)
    batching = BatchingSpec(max_batch=8, chunk_tokens=2048)
    m = serve(config, design_costs(config, workload, batching), workload, LoadSpec(1.0), batching).metrics
    chunks = sum(float(processor_forward_cost(config.target, config.system.verify, n, c, 1).time_s)
                 for n, c in ((2048, 0), (2048, 2048), (904, 4096)))
    assert m.ttft_s["p50"] == pytest.approx(chunks, rel=1e-9)


def test_batch_one_is_an_mg1_queue(catalog):
    """max batch 1, prefill alone: FCFS single server. Mean wait in queue (TTFT - prefill) against
    Pollaczek-Khinchine, W = lambda E[S^2] / (2 (1 - rho)), with S summed from forward costs."""
    config, p = _ar(catalog, "llama-3.1-8b"), 64
    outputs = (2, 8, 24, 60)
    workload = Workload("mg1", LengthDistribution("fixed", p), LengthDistribution("empirical", 20.0, values=outputs))
    cost = lambda n, c: float(processor_forward_cost(config.target, config.system.verify, n, c, 1).time_s)  # noqa: E731
    service = np.array([cost(p, 0) + sum(cost(1, p + j) for j in range(1, o)) for o in outputs])
    mean_s, second = service.mean(), (service ** 2).mean()
    rho = 0.6
    rate = rho / mean_s
    batching = BatchingSpec(max_batch=1, chunk_tokens=0)
    costs = design_costs(config, workload, batching)
    alone = serve(config, costs, workload, LoadSpec(1e-3, 3e4), batching).outcome  # each served alone: S exactly
    served = alone.finish_s - alone.first_token_s + cost(p, 0)
    for o, s in zip(outputs, service):
        assert served[alone.requests.output_tokens == o] == pytest.approx(s, rel=1e-9)
    ratios = []
    for seed in range(4):  # the mean wait of one run of ~9,000 requests scatters ~5% at rho = 0.6
        result = serve(config, costs, workload, LoadSpec(rate, 9000 * mean_s / rho, seed=seed), batching)
        requests = result.outcome.requests
        wait = result.outcome.first_token_s - requests.arrival_s - cost(p, 0)
        ratios.append(float(np.mean(wait)) / (rate * second / (2 * (1 - rho))))
        assert result.metrics.verify_utilisation == pytest.approx(rho, rel=0.03)
    assert float(np.mean(ratios)) == pytest.approx(1.0, abs=0.04)


def test_every_request_is_served_in_full_and_runs_repeat(catalog):
    config = _dfvg(catalog)
    workload = catalog.workload("sharegpt-vllm")
    batching = BatchingSpec(max_batch=64)
    costs = design_costs(config, workload, batching)
    load = LoadSpec(3.0, 30.0, slo_ttft_s=1.0, slo_tpot_s=0.05, seed=5)
    first, again = serve(config, costs, workload, load, batching), serve(config, costs, workload, load, batching)
    out = first.outcome
    assert np.all(np.isfinite(out.finish_s)) and np.all(out.finish_s >= out.first_token_s)
    assert np.all(out.first_token_s > out.requests.arrival_s)
    assert first.metrics == again.metrics
    other = serve(config, costs, workload, dataclasses.replace(load, seed=6), batching)
    assert other.metrics != first.metrics
    m = first.metrics
    assert m.throughput_tokens_per_s == pytest.approx(out.requests.output_tokens.sum() / m.duration_s)
    assert 0 < m.goodput_requests_per_s <= m.throughput_requests_per_s
    assert m.good_output_tokens <= out.requests.output_tokens.sum()
    assert m.ttft_s["p50"] <= m.ttft_s["p90"] <= m.ttft_s["p99"]


def test_speculation_switches_off_above_the_cutoff(catalog):
    config = _dfvg(catalog)
    workload = catalog.workload("sharegpt-vllm")
    load = LoadSpec(4.0, 30.0, seed=1)
    shares = {}
    for cutoff in (0, 2, 4096):
        batching = BatchingSpec(max_batch=64, speculate_max_batch=cutoff)
        shares[cutoff] = serve(config, design_costs(config, workload, batching), workload, load, batching).metrics
    assert shares[2].speculative_share < shares[0].speculative_share
    assert shares[4096] == shares[0]
    assert shares[2].mean_decode_batch > 2  # the cutoff matters because the load batches past it


def test_mooncake_prompts_past_the_kv_cache_are_refused_not_the_run(catalog):
    config = _ar(catalog, device="rtx-4090")
    workload = catalog.workload("mooncake-conversation")
    batching = BatchingSpec()
    m = serve(config, design_costs(config, workload, batching), workload, LoadSpec(1.0, 60.0), batching).metrics
    assert 0 < m.rejected_requests < m.requests and m.slo_attainment <= 1 - m.rejected_requests / m.requests


def test_goodput_counts_requests_within_both_slos(catalog):
    config = _ar(catalog)
    workload = catalog.workload("sharegpt-vllm")
    batching = BatchingSpec()
    costs = design_costs(config, workload, batching)
    loose = serve(config, costs, workload, LoadSpec(2.0, 20.0), batching).metrics
    assert loose.slo_attainment == 1.0 and loose.goodput_requests_per_s == pytest.approx(loose.throughput_requests_per_s)
    tight = serve(config, costs, workload, LoadSpec(2.0, 20.0, slo_tpot_s=1e-6), batching).metrics
    only_one_token = tight.slo_attainment  # a request of one output token has no TPOT to miss
    assert only_one_token < 0.05 and math.isclose(tight.throughput_requests_per_s, loose.throughput_requests_per_s)


@pytest.mark.parametrize("placement", ["fpga", "colocated"])
def test_the_drafter_fills_its_cache_with_the_prompt(catalog, placement):
    """Alone, a prompt's first token waits for the target's prefill and the draft model's: side by side
    on two devices (the longer), one after the other on one."""
    config, p = _dfvg(catalog), 700
    if placement == "colocated":
        gpu = config.system.verify
        config = dataclasses.replace(config, system=SystemSpec(gpu, gpu), schedule="sequential", gpu_fill=False)
    workload = _trace(p, 4, 3, 30.0)
    batching = BatchingSpec(max_batch=8, chunk_tokens=2048)
    m = serve(config, design_costs(config, workload, batching), workload, LoadSpec(1.0), batching).metrics
    target = float(processor_forward_cost(config.target, config.system.verify, p, 0, 1).time_s)
    draft = float(device_forward_cost(config.draft, config.system.draft, p, 0, 1).time_s)
    expected = max(target, draft) if placement == "fpga" else target + draft
    assert m.ttft_s["p50"] == pytest.approx(expected, rel=1e-9)
    assert draft > 0.1 * target  # the drafter's share is not negligible here


def test_a_lookup_drafter_adds_nothing_to_the_prefill(catalog):
    cat = catalog.with_engine("trtllm")
    gpu = cat.device("h100-sxm")
    target = cat.model("llama-3.1-8b")
    config = DecodeConfig(target, SystemSpec(gpu, gpu), cat.draft("prompt-lookup", target.name),
                          cat.acceptance("0.5"), tree=parse_tree_spec("chain:3"), name="lookup")
    workload = _trace(500, 4, 3, 30.0)
    batching = BatchingSpec(max_batch=8)
    m = serve(config, design_costs(config, workload, batching), workload, LoadSpec(1.0), batching).metrics
    assert m.ttft_s["p50"] == pytest.approx(float(processor_forward_cost(target, gpu, 500, 0, 1).time_s), rel=1e-9)



@pytest.mark.parametrize("chunk", [0, 2048])
def test_every_gap_a_sequence_waits_is_counted(catalog, chunk):
    """The inter-token gaps of a request add up to its decode time, prefill stalls (chunk 0) included."""
    config = _ar(catalog, device="rtx-4090")
    workload = catalog.workload("sharegpt-vllm")
    batching = BatchingSpec(max_batch=64, chunk_tokens=chunk)
    out = serve(config, design_costs(config, workload, batching), workload, LoadSpec(4.0, 20.0, seed=2), batching).outcome
    many = out.requests.output_tokens > 1
    assert out.itl_s.sum() == pytest.approx(np.sum(out.finish_s[many] - out.first_token_s[many]), rel=1e-9)
    assert out.itl_s.size == np.sum(out.requests.output_tokens[many] - 1)  # AR: one emission per token


def test_a_token_budget_caps_the_speculating_batch(catalog):
    """Under a 14-token budget a chain of 6 (7 verify tokens a sequence) speculates for two sequences at
    a time, as vLLM counts speculative tokens against max_num_batched_tokens, and says so."""
    config = _dfvg(catalog)
    workload = catalog.workload("sharegpt-vllm")
    batching = BatchingSpec(max_batch=16, chunk_tokens=14)
    costs = design_costs(config, workload, batching)
    assert any("at most 2 sequences speculate" in w for w in costs.warnings)
    m = serve(config, costs, workload, LoadSpec(2.0, 20.0, seed=1), batching).metrics
    assert m.speculative_share > 0.9 and m.mean_decode_batch <= 2.0


@pytest.mark.parametrize("cutoff", [18, 30])
def test_a_cutoff_between_grid_batches_is_kept(catalog, cutoff):
    config = _dfvg(catalog)
    batching = BatchingSpec(max_batch=64, speculate_max_batch=cutoff)
    costs = design_costs(config, catalog.workload("sharegpt-vllm"), batching)
    # at the shortest context the FPGA holds every batch here; past the cutoff no batch speculates
    assert np.isfinite(costs.spec_cycle_s[cutoff - 1, 0]) and np.all(np.isnan(costs.spec_cycle_s[cutoff]))


def test_a_request_larger_than_the_cache_is_refused_alone(catalog):
    config = _ar(catalog, device="rtx-4090")
    workload = Workload("big", LengthDistribution("empirical", 100, values=(100, 200000, 300)),
                        LengthDistribution("empirical", 50, values=(50, 50, 50)), arrivals_s=(0.0, 1.0, 2.0), paired=True)
    batching = BatchingSpec()
    result = serve(config, design_costs(config, workload, batching), workload, LoadSpec(1.0, 3.0), batching)
    assert result.metrics.rejected_requests == 1 and result.metrics.slo_attainment == pytest.approx(2 / 3)
    assert np.isnan(result.outcome.finish_s[1]) and np.all(np.isfinite(result.outcome.finish_s[[0, 2]]))
