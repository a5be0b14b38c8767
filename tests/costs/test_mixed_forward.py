"""A mixed forward (continuous batching: decodes beside a prefill chunk) against the single-phase
forward it must reduce to: the same work split into parts prices as the whole."""

import pytest

from dfvg_dse.costs import mixed_forward_cost, processor_forward_cost


@pytest.mark.parametrize("engine", ["roofline", "trtllm", "vllm", "llama.cpp"])
@pytest.mark.parametrize("device,model,tp", [("rtx-4090", "qwen3-8b", 1), ("h100-sxm", "llama-3.1-70b", 4),
                                            ("a100-80gb", "mixtral-8x7b", 2), ("xeon-silver-4310", "llama-68m", 1)])
def test_one_part_is_the_forward_and_split_batches_add_up(catalog, engine, device, model, tp):
    cat = catalog.with_engine(engine)
    m = cat.model(model)
    d = cat.device(device, tensor=tp) if tp > 1 else cat.device(device)
    for n, c, b in ((1, 512, 8), (7, 1024, 3), (512, 0, 1)):
        whole = float(processor_forward_cost(m, d, n, c, b).time_s)
        assert float(mixed_forward_cost(m, d, [(n, c, b)]).time_s) == pytest.approx(whole, rel=1e-12)
        if b > 1:  # one phase split into two groups of sequences is the same forward
            split = float(mixed_forward_cost(m, d, [(n, c, 1), (n, c, b - 1)]).time_s)
            assert split == pytest.approx(whole, rel=1e-9)


def test_a_chunk_beside_decodes_costs_less_than_alone_plus_decodes(catalog):
    """The weights stream once: decodes + a chunk cost less than the two forwards, more than either."""
    cat = catalog.with_engine("vllm")
    m, d = cat.model("llama-3.1-8b"), cat.device("h100-sxm")
    decode = float(processor_forward_cost(m, d, 1, 1024, 16).time_s)
    chunk = float(processor_forward_cost(m, d, 512, 256, 1).time_s)
    mixed = float(mixed_forward_cost(m, d, [(1, 1024, 16), (512, 256, 1)]).time_s)
    assert max(decode, chunk) < mixed < decode + chunk


@pytest.mark.parametrize("engine", ["hf", "vllm", "trtllm", "torch"])
@pytest.mark.parametrize("model", ["llama-2-7b", "llama-3.1-8b", "qwen3-8b"])
def test_adding_a_chunk_never_makes_a_step_cheaper(catalog, engine, model):
    # a review found a prefill chunk beside long-context decodes priced the step below the decodes
    # alone (attention's tile then averaged over the parts' tokens): every part adds work, so time
    cat = catalog.with_engine(engine)
    m, d = cat.model(model), cat.device("h100-sxm")
    for decodes, chunk in (((1, 8192, 63), (512, 0, 1)), ((1, 1024, 32), (256, 0, 1)), ((4, 2048, 64), (512, 0, 1)),
                           ((1, 4096, 128), (512, 0, 1)), ((1, 4096, 63), (64, 0, 1))):
        alone = float(mixed_forward_cost(m, d, [decodes]).time_s)
        assert float(mixed_forward_cost(m, d, [decodes, chunk]).time_s) > alone, (decodes, chunk)


def test_a_mixed_steps_attention_costs_its_parts_at_their_own_tiles(catalog):
    # written out by hand: each part's attention FLOPs at the rate of a tile of its own new tokens x
    # the GQA group, summed, plus the GEMMs of all the rows stacked together
    from dfvg_dse.costs.processor import engine_rates
    from dfvg_dse.costs.work import forward_work

    cat = catalog.with_engine("hf")
    m, d = cat.model("llama-3.1-8b"), cat.device("h100-sxm")
    engine, g = d.engine, m.query_heads_per_kv
    rate, _ = engine_rates(m, d, engine)
    parts = [(1, 8192, 63), (512, 0, 1), (4, 300, 8)]
    rows = sum(n * b for n, _, b in parts)
    attention = sum(float(forward_work(m, n, c, b).attention_flops)
                    / (rate * n * g / (n * g + engine.half_rows) * engine.attention_efficiency) for n, c, b in parts)
    linear = sum(float(forward_work(m, n, c, b).linear_flops) for n, c, b in parts) / (rate * rows / (rows + engine.half_rows))
    assert float(mixed_forward_cost(m, d, parts).compute_time_s) == pytest.approx(attention + linear, rel=1e-9)
