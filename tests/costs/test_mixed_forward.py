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
