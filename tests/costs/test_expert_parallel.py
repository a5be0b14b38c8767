"""Expert parallelism (issue 17): the busiest GPU's experts against Monte Carlo routing, shards that
hold whole experts, forwards that stream the busiest GPU's experts, and the CLI and exports."""

from __future__ import annotations


import numpy as np
import pytest

from dfvg_dse.costs import device_forward_cost, memory_fit, param_counts
from dfvg_dse.costs.moe import expected_busiest_rank_experts, expected_distinct_experts, inclusion_probabilities
from dfvg_dse.costs.parallel import shard_model
from dfvg_dse.costs.work import forward_work
from dfvg_dse.specs import InputError, MoeSpec, SpecError
from dfvg_dse.specs.parallel import group_name


def _busiest_by_monte_carlo(moe: MoeSpec, tokens: int, draws: int, rng: np.random.Generator) -> tuple[float, float]:
    """Mean and standard error of the busiest GPU's distinct experts when each token picks k distinct
    experts with the spec's inclusion probabilities (systematic sampling over the experts in a fresh
    random order per token, which keeps each expert's probability and no pattern among them) and GPU r
    holds experts r, r + R, ..."""
    q = inclusion_probabilities(moe)
    owner = np.arange(moe.n_experts) % moe.ep_ranks
    out = []
    for _ in range(draws):
        touched = np.zeros(moe.n_experts, dtype=bool)
        for _ in range(tokens):
            order = rng.permutation(moe.n_experts)
            edges = np.concatenate([[0.0], np.cumsum(q[order])])
            points = rng.random() + np.arange(moe.experts_per_token)
            touched[order[np.searchsorted(edges, points, side="right") - 1]] = True
        out.append(np.bincount(owner[touched], minlength=moe.ep_ranks).max())
    return float(np.mean(out)), float(np.std(out) / np.sqrt(draws))


@pytest.mark.parametrize("experts,k,ranks,skew", [(128, 8, 4, 0.0), (128, 8, 8, 0.0), (8, 2, 2, 0.0),
                                                  (256, 8, 8, 0.0), (64, 6, 4, 0.8)])
@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
def test_the_busiest_gpu_matches_monte_carlo(experts, k, ranks, skew, tokens):
    moe = MoeSpec(experts, k, 64, routing_skew=skew, ep_ranks=ranks)
    mean, sem = _busiest_by_monte_carlo(moe, tokens, 400, np.random.default_rng(7))
    predicted = float(expected_busiest_rank_experts(moe, tokens))
    # the closed form treats experts as independent; a token's k are distinct, so the counts of one
    # GPU vary a little less than it assumes: within 5% of the simulated mean (measured: under 3%)
    assert abs(predicted / mean - 1) <= 0.05 + 4 * sem / mean, (predicted, mean, sem)
    even = float(expected_distinct_experts(moe, tokens)) / ranks
    assert predicted >= even - 1e-9 and predicted <= moe.experts_per_rank + 1e-9


def test_the_busiest_gpu_broadcasts_over_arrays():
    moe = MoeSpec(128, 8, 768, ep_ranks=4)
    n = np.array([[1, 8], [64, 8]])
    out = expected_busiest_rank_experts(moe, n)
    assert out.shape == (2, 2) and out[0, 1] == out[1, 1]
    assert [float(expected_busiest_rank_experts(moe, t)) for t in (1, 8, 64)] == pytest.approx(list(out.ravel()[[0, 1, 2]]))


def test_an_expert_parallel_shard_holds_whole_experts(catalog):
    model = catalog.model("qwen3-30b-a3b")  # 128 experts of width 768
    tp, ep = shard_model(model, 4), shard_model(model, 4, expert=4)
    assert tp.moe.d_expert == 192 and tp.moe.ep_ranks == 1
    assert ep.moe.d_expert == 768 and ep.moe.ep_ranks == 4 and ep.moe.experts_per_rank == 32
    # the same weights per GPU either way: a quarter of every expert or a quarter of the experts
    assert param_counts(ep).routed == param_counts(tp).routed == param_counts(model).routed // 4
    assert param_counts(ep).total == param_counts(tp).total
    fit = memory_fit(model, catalog.device("4xh100-sxm-ep4"), 4096)
    assert fit.weight_bytes == pytest.approx(param_counts(tp).total * model.weight_bytes_per_param)


def test_an_expert_parallel_forward_streams_the_busiest_gpus_experts(catalog):
    model = catalog.model("qwen3-30b-a3b")
    ep, tp = catalog.device("4xh100-sxm-ep4"), catalog.device("4xh100-sxm")
    shard = shard_model(model, 4, expert=4)
    bpp = model.weight_bytes_per_param
    for n in (1, 8, 64):
        busiest = float(expected_busiest_rank_experts(shard.moe, n))
        # brute force: a shard's attention, router, norms and head, plus the busiest GPU's whole experts
        attention = (2048 * 32 * 128 * 2 + 2 * 2048 * 4 * 128) // 4  # q, o and k, v over 4 GPUs
        router = 2048 * 128
        head = 2048 * model.vocab_size // 4
        norms = model.n_layers * (2 * 2048 + 2 * 128) + 2048
        expected = (model.n_layers * (attention + router + busiest * 3 * 2048 * 768) + head + norms) * bpp
        assert float(forward_work(shard, n, 512).weight_bytes) == pytest.approx(expected, rel=1e-9)
        assert busiest * 4 > float(expected_distinct_experts(model.moe, n)) - 1e-9  # imbalance over the even split
    t_ep = [float(device_forward_cost(model, ep, n, 512).time_s) for n in (1, 8, 64)]
    t_tp = [float(device_forward_cost(model, tp, n, 512).time_s) for n in (1, 8, 64)]
    assert all(a > b for a, b in zip(t_ep, t_tp))  # at batch 1 the imbalance costs more than whole GEMMs gain


def test_expert_parallelism_is_refused_where_it_does_not_apply(catalog):
    dense = catalog.model("llama-2-7b")  # a dense model is tensor parallel on an expert-parallel group
    assert float(device_forward_cost(dense, catalog.device("4xh100-sxm-ep4"), 1, 0).time_s) == \
        float(device_forward_cost(dense, catalog.device("4xh100-sxm"), 1, 0).time_s)
    with pytest.raises(InputError, match="4xh100-sxm-ep2: .*must be 1 or the tensor-parallel degree"):
        catalog.device("h100-sxm", tensor=4, expert=2)
    with pytest.raises(SpecError, match="must divide the 8 experts"):
        MoeSpec(8, 2, 64, ep_ranks=3)
    assert group_name("h100-sxm", expert=4) == "4xh100-sxm-ep4"
    assert catalog.device("h100-sxm", expert=4).name == "4xh100-sxm-ep4"


def test_the_shared_expert_splits_in_width_under_expert_parallelism_too(catalog):
    """vLLM shards DeepSeek-V3's shared expert over the tensor-parallel GPUs whether or not the routed
    experts are spread: per GPU, EP 8 and TP 8 then hold the same weights (a routed expert whole or an
    eighth of each comes to the same)."""
    model = catalog.model("deepseek-v3")
    tp, ep = shard_model(model, 8), shard_model(model, 8, expert=8)
    assert tp.moe.shared_width == ep.moe.shared_width == 2048 // 8
    assert param_counts(tp).total == param_counts(ep).total
    assert memory_fit(model, catalog.device("8xh100-sxm-ep8"), 4096).weight_bytes == \
        memory_fit(model, catalog.device("8xh100-sxm"), 4096).weight_bytes


def test_pipeline_stages_count_their_own_layer_kinds(catalog):
    gpt = catalog.model("gpt-oss-120b")  # 36 layers alternating 18 windowed, 18 full
    for pp, sliding in ((2, 9), (4, 4), (36, 0)):
        stage = shard_model(gpt, 1, pp)
        assert stage.sliding_layers == sliding, pp
    half = memory_fit(gpt, catalog.device("h100-sxm", pipeline=2), 100_000).kv_cache_bytes
    whole = memory_fit(gpt, catalog.device("h100-sxm"), 100_000).kv_cache_bytes
    assert float(half) == pytest.approx(float(whole) / 2)  # each stage caches its 9 full-attention layers' share
    ds = catalog.model("deepseek-v3")  # 3 dense then 58 MoE layers: the largest stage is all MoE
    assert shard_model(ds, 8, 2).moe.dense_layers == 0 and shard_model(ds, 1, 32).n_layers == 2
    assert float(device_forward_cost(ds, catalog.device("h200", pipeline=32), 1, 0).time_s) > 0
