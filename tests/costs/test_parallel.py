"""Stages over several GPUs (issue 17): shards against the full model, the ring all-reduce against a
step-by-step simulation of one, NCCL's own latency model, group devices and their memory fit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dfvg_dse.catalog.errors import UnknownNameError
from dfvg_dse.costs import device_forward_cost, memory_fit, param_counts
from dfvg_dse.costs.parallel import ALL_REDUCES_PER_LAYER, collective_time_s, communication_time_s, shard_model
from dfvg_dse.specs import InputError, SpecError
from dfvg_dse.specs.parallel import group_device, parse_group_name


@pytest.mark.parametrize("name,tensor", [("llama-2-7b", 2), ("llama-2-7b", 8), ("llama-2-70b", 4), ("llama-2-70b", 8),
                                          ("qwen3-30b-a3b", 4), ("mixtral-8x7b", 2)])
def test_shards_hold_the_full_models_matrices_between_them(catalog, name, tensor):
    """Megatron splits every matrix along one axis: T shards' matmul weights sum to the model's, but
    for the MoE router (d_model x experts per MoE layer), which every shard holds whole."""
    model = catalog.model(name)
    shard = shard_model(model, tensor)
    assert model.vocab_size % tensor == 0 and model.n_kv_heads % tensor == 0  # no padding, no copies here
    router = model.moe_layers * model.d_model * model.moe.n_experts if model.moe else 0
    assert tensor * param_counts(shard).matmul - (tensor - 1) * router == param_counts(model).matmul
    assert tensor * param_counts(shard).embedding == param_counts(model).embedding
    assert tensor * shard.kv_bytes_per_token == model.kv_bytes_per_token


def test_kv_heads_are_copied_when_tensor_parallelism_exceeds_them(catalog):
    model = catalog.model("llama-3.1-70b")  # 64 query heads, 8 KV heads
    shard = shard_model(model, 16)
    assert (shard.n_heads, shard.n_kv_heads) == (4, 1)
    assert shard.kv_bytes_per_token == model.kv_bytes_per_token / 8  # 16 devices hold 2 copies of each head


@pytest.mark.parametrize("tensor,field,words", [(3, "tensor_parallel", "attention heads (32)"),
                                                (64, "tensor_parallel", "attention heads (32)")])
def test_a_shard_that_does_not_divide_is_refused(catalog, tensor, field, words):
    with pytest.raises(SpecError) as err:
        shard_model(catalog.model("llama-2-7b"), tensor)
    assert err.value.field == field and words in str(err.value)


def test_pipeline_stages_hold_their_layers(catalog):
    model = catalog.model("llama-2-70b")
    stage = shard_model(model, 2, pipeline=3)
    assert stage.n_layers == 27  # ceil(80 / 3)
    with pytest.raises(SpecError, match="must be <= llama-2-70b's 80 layers"):
        shard_model(model, 1, pipeline=81)


def _ring_all_reduce(data: np.ndarray, step_s: float, bandwidth: float) -> tuple[np.ndarray, float, int]:
    """A ring all-reduce run step by step on N ranks' buffers: reduce-scatter, then all-gather.
    Returns every rank's result, the seconds (every rank sends one chunk per step, all in parallel)
    and the steps."""
    ranks = data.shape[0]
    chunks = [np.array_split(row.copy(), ranks) for row in data]
    seconds, steps = 0.0, 0
    for phase in ("reduce", "gather"):
        for s in range(ranks - 1):
            sent = []
            for r in range(ranks):
                index = (r - s + (0 if phase == "reduce" else 1)) % ranks
                sent.append(((r + 1) % ranks, index, chunks[r][index].copy()))
            for to, index, payload in sent:
                chunks[to][index] = chunks[to][index] + payload if phase == "reduce" else payload
            seconds += step_s + max(p.nbytes for _, _, p in sent) / bandwidth
            steps += 1
    return np.stack([np.concatenate(c) for c in chunks]), seconds, steps


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_the_ring_all_reduce_matches_a_simulation_of_one(catalog, ranks):
    link = catalog.link("nvlink-3")
    rng = np.random.default_rng(ranks)
    data = rng.standard_normal((ranks, 8192 * ranks))  # float64 buffers, an even split
    result, seconds, steps = _ring_all_reduce(data, link.collective_step_latency_s, link.achieved_bandwidth_bytes_per_s)
    np.testing.assert_allclose(result, np.broadcast_to(data.sum(axis=0), data.shape))
    assert steps == 2 * (ranks - 1)
    predicted = float(collective_time_s(link, data[0].nbytes, ranks))
    assert predicted == pytest.approx(link.collective_base_latency_s + seconds, rel=1e-12)


def test_small_all_reduces_follow_nccls_latency_model(catalog):
    """NCCL src/graph/tuning.cc (NVIDIA/nccl@5067397): one ring LL all-reduce within a node is
    baseLat 6.6 us + 2(N-1) x hwLat 0.6 us over NVLink, 1.0 us over PCIe (bytes aside)."""
    for link_name, per_step in (("nvlink-3", 0.6e-6), ("nvlink-4", 0.6e-6), ("pcie-gen4-x16-p2p", 1.0e-6)):
        link = catalog.link(link_name)
        for ranks in (2, 4, 8):
            assert float(collective_time_s(link, 0.0, ranks)) == pytest.approx(6.6e-6 + 2 * (ranks - 1) * per_step)
    assert float(collective_time_s(catalog.link("nvlink-3"), 1e6, 1)) == 0.0


def test_across_nodes_the_tree_wins_at_many_ranks(catalog):
    link = catalog.link("ethernet-100g-rdma")
    ranks = 32
    ring = link.collective_base_latency_s + 2 * (ranks - 1) * link.collective_step_latency_s
    tree = link.collective_base_latency_s + 2 * 5 * link.collective_step_latency_s
    assert float(collective_time_s(link, 0.0, ranks)) == pytest.approx(min(ring, tree)) == pytest.approx(tree)


def test_a_group_device_totals_its_units(catalog):
    unit = catalog.device("h100-sxm")
    group = catalog.device("4xh100-sxm")
    assert group.parallel.tensor == 4 and group.parallel.link.name == unit.peer_link == "nvlink-4"
    assert group.memory_capacity_bytes == 4 * unit.memory_capacity_bytes
    assert (group.tdp_w, group.decode_power_w, group.idle_power_w) == (4 * unit.tdp_w, 4 * unit.decode_power_w,
                                                                       4 * unit.idle_power_w)
    assert catalog.device("h100-sxm", tensor=1) == unit


@pytest.mark.parametrize("name,parsed", [("4xh100-sxm", ("h100-sxm", 4, 1, 1)), ("8xh100-sxm-pp2", ("h100-sxm", 4, 2, 1)),
                                         ("2xrtx-4090", ("rtx-4090", 2, 1, 1)), ("4xh100-sxm-ep4", ("h100-sxm", 4, 1, 4)),
                                         ("16xh100-sxm-pp2-ep8", ("h100-sxm", 8, 2, 8)),
                                         ("16xh100-sxm-ep8-pp2", ("h100-sxm", 8, 2, 8)), ("8xh100-sxm-pp2-pp2", None),
                                         ("h100-sxm", None),
                                         ("x4h100", None)])
def test_group_names(name, parsed):
    assert parse_group_name(name) == parsed


def test_bad_groups_are_refused_in_one_line(catalog):
    with pytest.raises(UnknownNameError):
        catalog.device("4xh900")
    with pytest.raises(InputError, match="a CPU stage is one device"):
        catalog.device("2xxeon-8480plus")
    with pytest.raises(SpecError, match="do not split into 3 pipeline stages"):
        catalog.device("8xh100-sxm-pp3")
    with pytest.raises(InputError, match="already a group"):
        catalog.device("4xh100-sxm", tensor=2)
    no_link = dataclasses.replace(catalog.device("h100-sxm"), peer_link=None)
    with pytest.raises(SpecError, match="names no peer_link"):
        group_device(no_link, 2)


def test_a_group_forward_is_its_shards_plus_the_collectives(catalog):
    model, group = catalog.model("llama-2-70b"), catalog.device("4xa100-80gb")
    unit = catalog.device("a100-80gb")
    n, c, b = np.array([1, 8, 512]), 256, 2
    cost = device_forward_cost(model, group, n, c, b)
    shard = device_forward_cost(shard_model(model, 4), unit, n, c, b)
    comm = communication_time_s(model, group.parallel, n, b)
    np.testing.assert_allclose(cost.time_s, shard.time_s + comm)
    np.testing.assert_allclose(cost.communication_time_s, comm)
    hidden = n * b * model.d_model * 2.0
    link = group.parallel.link
    expected = ((ALL_REDUCES_PER_LAYER * model.n_layers + 1) * collective_time_s(link, hidden, 4)
                + collective_time_s(link, n * b * model.vocab_size * 2.0, 4, all_reduce=False))
    np.testing.assert_allclose(comm, expected)
    assert cost.time_s[0] < device_forward_cost(model, unit, 1, c, b).time_s / 2  # decode: memory splits four ways


def test_pipeline_stages_add_hops_and_overheads_not_speed(catalog):
    model = catalog.model("llama-2-70b")
    tp, pp = catalog.device("4xh100-sxm"), catalog.device("8xh100-sxm-pp2")
    t_tp = float(device_forward_cost(model, tp, 1, 128).time_s)
    t_pp = float(device_forward_cost(model, pp, 1, 128).time_s)
    hop = pp.parallel.link.latency_s + model.d_model * 2.0 / pp.parallel.link.achieved_bandwidth_bytes_per_s
    assert t_pp == pytest.approx(t_tp + hop + tp.forward_overhead_s)


def test_memory_fit_is_per_device(catalog):
    model = catalog.model("llama-2-70b")  # 138 GB of fp16 weights
    assert not memory_fit(model, catalog.device("a100-80gb"), 512).fits
    fit = memory_fit(model, catalog.device("2xa100-80gb"), 512)
    assert fit.fits and fit.capacity_bytes == catalog.device("a100-80gb").memory_capacity_bytes
    assert fit.weight_bytes == pytest.approx(param_counts(model).total * 2 / 2, rel=0.001)
    stage = memory_fit(model, catalog.device("4xa100-80gb-pp2"), 512)
    assert stage.weight_bytes < fit.weight_bytes / 1.9
