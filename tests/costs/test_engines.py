"""Engine profiles (issue 14, docs/engines.md): the smooth roofline, group-scale bytes, the fit that
recovers known parameters, leave-one-source-out, and the shipped profiles' plausibility."""

import dataclasses
import itertools
import json

import numpy as np
import pytest

from dfvg_dse.catalog import Catalog
from dfvg_dse.costs.processor import processor_forward_cost
from dfvg_dse.costs.roofline import smooth_roofline_time
from dfvg_dse.specs import SpecError
from dfvg_dse.specs.engines import EngineProfile, KernelEfficiency
from dfvg_dse.specs.measurements import ForwardMeasurement
from dfvg_dse.validation.engines import POOLED, _take, features, fit_engines, leave_one_source_out


def test_the_smooth_roofline_is_the_p_norm():
    c, m = np.array([1.0, 2.0, 3.0, 0.0]), np.array([2.0, 2.0, 0.5, 4.0])
    for p in (1.0, 2.5, 8.0):
        t = smooth_roofline_time(c, m, 0.1, p)
        brute = np.array([(a ** p + b ** p) ** (1 / p) for a, b in zip(c, m)]) + 0.1
        assert np.allclose(t.time_s, brute)
    assert np.allclose(smooth_roofline_time(c, m, 0.0, 64.0).time_s, np.maximum(c, m), rtol=0.011)  # p 64: 1.1% of max
    assert np.allclose(smooth_roofline_time(c, m, 0.0, 1.0).time_s, c + m)


def test_group_scales_add_bytes_per_weight(catalog):
    # ggml Q4_0 stores 32 weights in 18 bytes (16 of nibbles, one fp16 scale): 4.5 bits per weight
    # (ggml-org/llama.cpp ggml/src/ggml-common.h, block_q4_0); a 2-byte scale per 32 is the same figure
    model = catalog.model("llama-2-7b").with_dtypes("int4")
    assert model.weight_bytes_per_param == 0.5
    assert model.with_quantisation(32).weight_bytes_per_param == pytest.approx(18 / 32)
    assert model.with_quantisation(0, 4.85).weight_bytes_per_param == pytest.approx(4.85 / 8)
    assert catalog.model("llama-2-7b").with_quantisation(32).weight_bytes_per_param == 2.0  # no scales on fp16
    with pytest.raises(SpecError, match="weight_group_size"):
        model.with_quantisation(1)


@pytest.mark.parametrize("field, value", [("forward_overhead_s", -1e-6), ("layer_overhead_s", 1.0),
                                          ("sequence_overhead_s", -1e-6), ("sequence_overhead_s", float("nan")),
                                          ("sharpness", 0.5), ("attention_efficiency", 1.5), ("host_overlap", 0.9),
                                          ("host_overlap", 65.0)])
def test_a_profile_outside_its_ranges_is_refused(field, value):
    good = dict(name="x", kernels=(KernelEfficiency("16bit", 0.8, 0.5),), forward_overhead_s=1e-5,
                layer_overhead_s=1e-6, sharpness=4.0)
    with pytest.raises(SpecError, match=field.replace("_s", "")):
        EngineProfile(**{**good, field: value})
    with pytest.raises(SpecError, match="fraction"):
        KernelEfficiency("16bit", 1.2, 0.5)


KNOWN = EngineProfile("synthetic", (KernelEfficiency("16bit", 0.82, 0.61), KernelEfficiency("int4", 0.55, 0.35)),
                      forward_overhead_s=30e-6, layer_overhead_s=6e-6, sharpness=3.0, attention_efficiency=0.7,
                      sequence_overhead_s=25e-6, device_scales=(("ampere-datacenter", 1.0, 1.0), ("hopper", 0.8, 1.1)))


def _synthetic_rows(catalog, profile, source="s1", engine="trtllm"):
    """Rows 'measured' by pricing settings with `profile` through the cost model itself (the path
    `--engine` takes), so a fit that works recovers the profile."""
    rows, times = [], []
    for device, model, dtype, (phase, n, b) in itertools.product(
            ("a100-80gb", "h100-sxm"), ("llama-2-7b", "qwen3-8b"), ("float16", "int4"),
            (("decode", 1, 1), ("decode", 1, 16), ("decode", 1, 64), ("prefill", 128, 1), ("prefill", 1024, 1),
             ("prefill", 4096, 1))):
        row = ForwardMeasurement(source, "synthetic", engine, device, model, dtype, b, phase,
                                 n if phase == "prefill" else 256, 0 if phase == "prefill" else 129, "ms", 1.0,
                                 group_size=32 if dtype == "int4" else 0)
        spec = catalog.model(model).with_dtypes(dtype).with_quantisation(row.group_size)
        gpu = dataclasses.replace(catalog.device(device), engine=profile)
        (tokens, context, _), = row.priced_forwards
        seconds = float(processor_forward_cost(spec, gpu, tokens, context, b).time_s)
        rows.append(dataclasses.replace(row, value=seconds * 1e3))
        times.append(seconds)
    return rows, np.array(times)


def _features(catalog, rows):
    plain = catalog.with_engine("roofline")
    return features(rows, {r.model: plain.model(r.model) for r in rows}, {r.device: plain.device(r.device) for r in rows})


def test_the_fit_recovers_a_known_profile(catalog):
    rows, times = _synthetic_rows(catalog, KNOWN)
    f = _features(catalog, rows)
    assert np.allclose(f.measured_s, times)
    fit = fit_engines(f)
    assert np.allclose(fit.predict(f), times, rtol=0.04)  # the priors (toward pooled, defaults) bias a little
    profile = fit.profile("trtllm", "test")
    got = {k.weight_class: k for k in profile.kernels}
    assert got["16bit"].bandwidth_efficiency == pytest.approx(0.82, rel=0.05)
    assert got["int4"].bandwidth_efficiency == pytest.approx(0.55, rel=0.05)
    assert profile.sequence_overhead_s == pytest.approx(25e-6, rel=0.3)  # set by the batch-16 and -64 decodes
    # the fitted profile, priced through the cost model, gives what the fit predicted
    for row, predicted in zip(rows, fit.predict(f)):
        spec = catalog.model(row.model).with_dtypes(row.dtype).with_quantisation(row.group_size)
        gpu = dataclasses.replace(catalog.device(row.device), engine=profile)
        (tokens, context, _), = row.priced_forwards
        assert float(processor_forward_cost(spec, gpu, tokens, context, row.batch).time_s) == pytest.approx(predicted,
                                                                                                             rel=1e-9)


def test_the_sequence_overhead_is_paid_per_sequence_not_per_token(catalog):
    model = catalog.model("llama-2-7b")
    none = dataclasses.replace(catalog.device("a100-80gb"), engine=dataclasses.replace(KNOWN, sequence_overhead_s=0.0))
    some = dataclasses.replace(none, engine=KNOWN)
    for tokens, batch in ((1, 1), (1, 32), (64, 1), (8, 8)):
        extra = float(processor_forward_cost(model, some, tokens, 300, batch).time_s
                      - processor_forward_cost(model, none, tokens, 300, batch).time_s)
        assert extra == pytest.approx(batch * 25e-6)  # a 64-token verify of one sequence pays it once


def test_host_launches_overlap_the_kernels_as_the_profile_says(catalog):
    # t = (R^q + H^q)^(1/q) + t_forward + b t_sequence, with R the kernels' time and H = L x t_layer,
    # checked against the two limits written out by hand: q = 1 adds the launches (a host sync per
    # layer), a large q is the slower of the host and the GPU (an eager engine launching ahead)
    model, gpu = catalog.model("llama-3.1-8b"), catalog.device("h100-sxm")
    host = dataclasses.replace(KNOWN, layer_overhead_s=300e-6)
    fixed = host.forward_overhead_s + 4 * host.sequence_overhead_s
    launches = model.n_layers * 300e-6
    none = dataclasses.replace(host, layer_overhead_s=0.0)
    for tokens in (1, 16, 256, 2048):
        kernels = float(processor_forward_cost(model, dataclasses.replace(gpu, engine=none), tokens, 512, 4).time_s) - fixed
        for q in (1.0, 2.5, 64.0):
            engine = dataclasses.replace(host, host_overlap=q)
            t = float(processor_forward_cost(model, dataclasses.replace(gpu, engine=engine), tokens, 512, 4).time_s)
            assert t == pytest.approx((kernels ** q + launches ** q) ** (1 / q) + fixed, rel=1e-9)
            if q == 1.0:
                assert t == pytest.approx(kernels + launches + fixed, rel=1e-9)
            if q == 64.0:
                assert t == pytest.approx(max(kernels, launches) + fixed, rel=0.011)


def test_attention_tiles_hold_one_sequences_new_tokens_times_its_gqa_group(catalog):
    # attention's compute time written out by hand: its FLOPs at the GEMM rate R scaled by
    # M / (M + M_half) with M = new tokens per sequence x query heads per KV head (the tiles of a
    # FlashDecoding-style kernel), whatever the batch; the GEMMs keep M = new tokens x batch
    from dfvg_dse.costs.processor import engine_rates, engine_roofline
    from dfvg_dse.costs.work import forward_work

    gpu = dataclasses.replace(catalog.device("h100-sxm"), engine=KNOWN)
    for name, group in (("llama-3.1-8b", 4), ("llama-2-7b", 1)):
        model = catalog.model(name)
        assert model.query_heads_per_kv == group
        rate, _ = engine_rates(model, gpu, KNOWN)
        for n, b in ((1, 1), (1, 64), (16, 1), (16, 8), (512, 1)):
            work = forward_work(model, n, 2048, b)
            t = engine_roofline(model, gpu, work, KNOWN, b)
            gemm = float(work.linear_flops) / (rate * n * b / (n * b + KNOWN.half_rows))
            tiles = n * group
            attention = float(work.attention_flops) / (rate * tiles / (tiles + KNOWN.half_rows) * KNOWN.attention_efficiency)
            assert float(t.compute_time_s) == pytest.approx(gemm + attention, rel=1e-9), (name, n, b)
    assert catalog.model("deepseek-v3").query_heads_per_kv == catalog.model("deepseek-v3").n_heads  # MLA: one latent


def test_the_fit_recovers_how_far_host_launches_overlap(catalog):
    # rows priced with an eager engine whose launches overlap its kernels (q = 4): the fit finds a q
    # well past 1 and prices the rows as they were made; the same rows made additive (q = 1) fit at q near 1
    for q, low, high in ((4.0, 2.5, 8.0), (1.0, 1.0, 1.3)):
        eager = dataclasses.replace(KNOWN, layer_overhead_s=300e-6, host_overlap=q)
        rows, times = _synthetic_rows(catalog, eager, "s2", "torch")
        fit = fit_engines(_features(catalog, rows))
        assert low <= fit.profile("torch", "t").host_overlap <= high
        assert np.median(np.abs(fit.predict(_features(catalog, rows)) / times - 1)) < 0.03


def test_leave_one_source_out_predicts_each_source_from_the_others(catalog):
    a, _ = _synthetic_rows(catalog, KNOWN, "s1", "trtllm")
    slow = dataclasses.replace(KNOWN, layer_overhead_s=40e-6)
    b, _ = _synthetic_rows(catalog, slow, "s2", "vllm")
    f = _features(catalog, a + b)
    held = np.array([s == "s2" for s in f.source])
    direct = fit_engines(_take(f, ~held)).predict(_take(f, held))
    loso = leave_one_source_out(f)
    assert np.allclose(loso[held], direct)
    # vllm is seen only in s2: held out, it is priced by the pooled profile, which missed its overhead
    assert np.median(np.abs(loso[held] / f.measured_s[held] - 1)) > np.median(
        np.abs(fit_engines(f).predict(f)[held] / f.measured_s[held] - 1))


def test_an_engine_without_rows_borrows_its_kernel_familys_profile_not_the_pool(catalog):
    # two tuned engines measured with one profile, llama.cpp (family ggml) with a much slower one:
    # SGLang, tuned but never measured, is priced by its family, not by a pool dragged toward ggml
    slow = dataclasses.replace(KNOWN, kernels=(KernelEfficiency("16bit", 0.45, 0.25), KernelEfficiency("int4", 0.3, 0.15)),
                               layer_overhead_s=60e-6)
    a, times = _synthetic_rows(catalog, KNOWN, "s1", "trtllm")
    b, _ = _synthetic_rows(catalog, KNOWN, "s2", "vllm")
    c, _ = _synthetic_rows(catalog, slow, "s3", "llama.cpp")
    fit = fit_engines(_features(catalog, a + b + c))
    lay = fit.layout
    assert lay.parent("vllm") == lay.parent("trtllm") == "family:tuned" and lay.parent("family:tuned") == POOLED
    assert lay.parent("llama.cpp") == "family:ggml" and lay.parent("hf") == POOLED  # eager engines: no family
    assert fit.borrowed() == ("gpt-fast", "sglang")  # the tuned engines without rows here
    as_sglang = _features(catalog, [dataclasses.replace(r, engine="sglang") for r in a])
    as_unknown = _features(catalog, [dataclasses.replace(r, engine="mlc-llm") for r in a])  # no family: pooled
    family_error = np.median(np.abs(fit.predict(as_sglang) / times - 1))
    pooled_error = np.median(np.abs(fit.predict(as_unknown) / times - 1))
    # the family sits between its engines and the pool (tied to the pool at FAMILY_PRIOR_SCALE): 11% vs 17% here
    assert family_error < 0.75 * pooled_error
    assert fit.profile("sglang", "t") != fit.profile(POOLED, "t")


def test_eager_rows_never_move_the_graph_engines(catalog):
    # the two-stage fit: the graph engines and the pooled profile are fitted as if the eager rows
    # were not there, and the eager engine recovers its own (host-bound) overheads beside them
    graph, _ = _synthetic_rows(catalog, KNOWN, "s1", "trtllm")
    eager_profile = dataclasses.replace(KNOWN, layer_overhead_s=300e-6, forward_overhead_s=40e-6)
    eager, eager_times = _synthetic_rows(catalog, eager_profile, "s2", "torch")
    alone, both = fit_engines(_features(catalog, graph)), fit_engines(_features(catalog, graph + eager))
    for name in ("trtllm", POOLED):
        assert alone.profile(name, "t") == both.profile(name, "t")
    f = _features(catalog, eager)
    error = np.abs(both.predict(f) / eager_times - 1)
    assert np.median(error) < 0.05 and error.max() < 0.25
    assert both.profile("torch", "t").layer_overhead_s == pytest.approx(300e-6, rel=0.2)


def test_the_shipped_profiles_are_plausible_and_read_back():
    catalog = Catalog.open()
    names = catalog.engine_names()
    assert names[0] == "roofline" and {"trtllm", "vllm", "llama.cpp", "gpt-fast", "hf", "generic"} <= set(names)
    for name in names[1:]:
        profile, data = catalog.engine_entry(name)
        assert profile.forward_overhead_s >= 0 and profile.layer_overhead_s >= 0 and 1 <= profile.sharpness <= 64
        assert 1 <= profile.host_overlap <= 64
        assert 0 <= profile.sequence_overhead_s <= 1e-3
        assert all(0 < k.bandwidth_efficiency <= 1 and 0 < k.compute_efficiency <= 1 for k in profile.kernels)
        assert 0 < profile.attention_efficiency <= 1
        assert all(0.1 <= c <= 10 and 0.1 <= b <= 10 for _, c, b in profile.device_scales)
        assert data["fp16_accumulate"]["source"]
        # fitted to its own rows, or (SGLang) its kernel family's profile, saying so
        assert data["fitted"]["rows"] > 0 or data["fitted"]["family"] == "tuned" and "kernel family" in profile.source
    assert catalog.engine("llama.cpp").fp16_accumulate and not catalog.engine("trtllm").fp16_accumulate
    # fitted to its own five sources: HF eager pays ~0.5 ms of Python per layer (issue 14's estimate)
    eager = catalog.engine("hf").layer_overhead_s
    assert 0.2e-3 < eager < 1e-3 and eager > 5 * catalog.engine("generic").layer_overhead_s


def test_an_engine_prices_gpus_only_and_roofline_is_the_old_model(catalog):
    plain = catalog.with_engine("roofline").device("a100-80gb")
    assert plain.engine is None and catalog.with_engine("trtllm").device("a100-80gb").engine.name == "trtllm"
    assert catalog.with_engine("trtllm").device("v80").engine is None  # FPGAs keep their own model
    with pytest.raises(SpecError, match="not FPGAs"):
        dataclasses.replace(catalog.device("v80"), engine=KNOWN)
    assert POOLED == "pooled"


def test_weights_without_fitted_kernels_are_priced_by_a_wider_class_and_said(run):
    # trtllm's published rows hold 16-bit and fp8 weights only: int4 falls back, with a warning
    result = run("cost", "--model", "llama-2-7b", "--device", "a100-80gb", "--weight-dtype", "int4")
    assert result.exit_code == 0 and "engine trtllm has no kernels fitted for int4 weights" in result.stderr
    quiet = run("cost", "--model", "llama-2-7b", "--device", "a100-80gb", "--weight-dtype", "int4", "--engine", "llama.cpp")
    assert quiet.exit_code == 0 and "no kernels fitted" not in quiet.stderr


def test_a_device_class_without_fitted_scales_is_priced_unscaled_and_said_once_per_device(run, catalog):
    # every shipped measurement is of an NVIDIA part: trtllm has fitted scales for hopper, none for cdna3
    trtllm = catalog.engine("trtllm")
    assert trtllm.lacks_scales("cdna3") and not trtllm.lacks_scales("hopper")
    assert not dataclasses.replace(trtllm, device_scales=()).lacks_scales("cdna3")  # fitted without classes
    result = run("cost", "--model", "llama-3.1-8b", "--device", "mi300x")
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert result.exit_code == 0 and len(lines) == 1, result.stderr
    assert "mi300x" in lines[0] and "'cdna3'" in lines[0] and "(1.0, 1.0)" in lines[0]
    records = json.loads(run("cost", "--model", "llama-3.1-8b", "--device", "mi300x", "--tokens", "1,8,64",
                             "--json").stdout)
    mi300x, (kernel, _) = catalog.device("mi300x"), trtllm.kernel("bfloat16")
    for record in records:  # one warning per point, and the rate is the kernels' own, unscaled
        assert [w for w in record["warnings"] if "'cdna3'" in w] == [lines[0][len("warning: "):]]
        assert record["achieved_bandwidth_bytes_per_s"] == pytest.approx(
            mi300x.main_memory.bandwidth_bytes_per_s * kernel.bandwidth_efficiency)
    group = run("cost", "--model", "llama-3.1-8b", "--device", "mi300x", "--tp", "8")
    assert [line for line in group.stderr.splitlines() if "'cdna3'" in line] == [
        lines[0].replace("mi300x's", "8xmi300x's")]
    estimate = json.loads(run("estimate", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--draft-device",
                              "v80", "--verify-device", "mi300x", "--acceptance", "0.63,0.11,0.06", "--json").stdout)
    assert sum("'cdna3'" in w for w in estimate["warnings"]) == 1
    for quiet in (("--device", "h100-sxm"), ("--device", "mi300x", "--engine", "roofline")):
        assert "scales fitted" not in run("cost", "--model", "llama-3.1-8b", *quiet).stderr, quiet


def test_a_profile_file_reads_back_as_written_and_a_bad_field_is_one_line(tmp_path):
    from dfvg_dse.catalog.engines import engine_document, parse_engine
    from dfvg_dse.catalog.errors import DataError

    path = tmp_path / "synthetic.toml"
    document = engine_document(dataclasses.replace(KNOWN, source="test"), "Synthetic", {"rows": 1}, "test")
    back = parse_engine(path, document)
    assert back.sequence_overhead_s == pytest.approx(KNOWN.sequence_overhead_s)
    assert back.half_rows == KNOWN.half_rows and back.sharpness == KNOWN.sharpness
    overlapping = engine_document(dataclasses.replace(KNOWN, source="test", host_overlap=2.5), "Synthetic", {"rows": 1}, "t")
    assert parse_engine(path, overlapping).host_overlap == 2.5
    for field, value in (("sequence_overhead_us", -3.0), ("sequence_overhead_us", "fast"), ("layer_overhead_us", 5e5),
                         ("host_overlap", 0.5), ("host_overlap", "half")):
        with pytest.raises(DataError) as err:
            parse_engine(path, {**document, field: value})
        message = str(err.value)
        assert str(path) in message and "\n" not in message
        assert field.replace("_us", "") in message
    old = {k: v for k, v in document.items() if k not in ("sequence_overhead_us", "host_overlap")}  # files before the terms
    assert parse_engine(path, old).sequence_overhead_s == 0.0 and parse_engine(path, old).host_overlap == 1.0


def test_an_eager_engine_is_tied_only_loosely_to_the_pooled_profile(catalog):
    # HF eager launches every kernel from Python (~0.5 ms per layer, issue 14): its rows must not drag
    # the pooled profile, which prices the engines nobody measured, as the same rows of a graph-captured
    # engine would; the eager engine's own rows still fit
    base = _synthetic_rows(catalog, KNOWN, "s1", "trtllm")[0]
    eager = dataclasses.replace(KNOWN, layer_overhead_s=500e-6)
    unmeasured = _features(catalog, _synthetic_rows(catalog, KNOWN, "p", "mlc-llm")[0])  # priced by the pooled one

    def errors(engine):
        extra = _synthetic_rows(catalog, eager, "s3", engine)[0] if engine else []
        f = _features(catalog, base + extra)
        fit = fit_engines(f)
        own = np.abs(fit.predict(f) / f.measured_s - 1)[len(base):]
        return np.median(np.abs(fit.predict(unmeasured) / unmeasured.measured_s - 1)), own

    alone, _ = errors(None)
    with_eager, own = errors("hf")
    with_graph, _ = errors("sglang")
    assert with_eager < alone + 0.05 < with_graph  # measured: 3.3%, 5.2% and 33.9%
    assert np.median(own) < 0.05


def test_mma_sync_kernels_reach_half_of_hoppers_peak_and_the_full_peak_elsewhere(catalog):
    # Hopper's dense tensor rate is twice the A100 SM's clock for clock, through wgmma only (its
    # whitepaper); llama.cpp's kernels issue mma.sync (a fact of its profile, read from its code)
    from dfvg_dse.costs.processor import engine_peak_flops_per_s

    plain = catalog.with_engine("roofline")
    h100, a100, rtx = plain.device("h100-pcie"), plain.device("a100-80gb"), plain.device("rtx-4090")
    assert h100.mma_sync_fraction == 0.5 and a100.mma_sync_fraction == 1.0 and rtx.mma_sync_fraction == 1.0
    assert engine_peak_flops_per_s(h100, "fp16", False, True) == pytest.approx(756e12 / 2)  # PB-11133-001_v02: 756 dense
    assert engine_peak_flops_per_s(h100, "fp16", False, False) == pytest.approx(756e12)
    assert engine_peak_flops_per_s(a100, "fp16", False, True) == pytest.approx(312e12)
    assert engine_peak_flops_per_s(rtx, "fp16", True, True) == pytest.approx(330.3e12)  # FP16 accumulate, untouched
    assert catalog.engine("llama.cpp").mma_sync_only and not catalog.engine("trtllm").mma_sync_only
    # a group of Hopper GPUs keeps the fraction: each GPU is one
    assert plain.device("h100-sxm", tensor=4).mma_sync_fraction == 0.5
    # priced through --engine: a compute-bound prefill of llama.cpp on the H100 pays the half rate
    model = catalog.model("llama-3.1-8b")
    full = dataclasses.replace(h100, engine=dataclasses.replace(catalog.engine("llama.cpp"), mma_sync_only=False))
    half = dataclasses.replace(h100, engine=catalog.engine("llama.cpp"))
    ratio = float(processor_forward_cost(model, half, 4096, 0).time_s / processor_forward_cost(model, full, 4096, 0).time_s)
    assert 1.5 < ratio < 2.0  # the GEMMs' time doubles; attention and the fixed costs do not all


def test_an_engine_fact_or_a_device_fraction_out_of_range_is_one_line(tmp_path):
    from dfvg_dse.catalog.engines import engine_document, parse_engine
    from dfvg_dse.catalog.errors import DataError

    path = tmp_path / "synthetic.toml"
    document = engine_document(dataclasses.replace(KNOWN, source="test", mma_sync_only=True), "S", {"rows": 1}, "t", "m")
    assert parse_engine(path, document).mma_sync_only
    assert not parse_engine(path, {k: v for k, v in document.items() if k != "mma_sync_only"}).mma_sync_only
    for bad in ({"value": "yes", "source": "x"}, {"value": True}, {"value": True, "source": " "}):
        with pytest.raises(DataError) as err:
            parse_engine(path, {**document, "mma_sync_only": bad})
        assert "mma_sync_only" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SpecError, match="mma_sync_fraction"):
        dataclasses.replace(Catalog.open().device("h100-sxm"), mma_sync_fraction=1.5)


def test_a_sparse_tree_mask_slows_attention_under_an_engine_profile_too(catalog):
    # the profile's attention rate is fitted on causal forwards; a tree's sparse mask runs at a fraction
    # of it, exactly as a profile whose attention rate were that fraction lower would price it
    gpu = catalog.with_engine("trtllm").device("rtx-4090")
    model = catalog.model("qwen3-8b")
    n, pairs = 64, None  # a verify of 64 rows over a long cache, where attention is a visible share
    masked = processor_forward_cost(model, gpu, n, 4096, 1, pairs, attention_efficiency=0.5)
    dense = processor_forward_cost(model, gpu, n, 4096, 1, pairs, attention_efficiency=1.0)
    slower = dataclasses.replace(gpu, engine=dataclasses.replace(gpu.engine, attention_efficiency=gpu.engine.attention_efficiency * 0.5))
    assert float(masked.time_s) == pytest.approx(float(processor_forward_cost(model, slower, n, 4096, 1, pairs).time_s))
    assert float(masked.time_s) > float(dense.time_s)


def test_a_kernel_per_query_head_prices_attention_at_one_head_per_tile(catalog):
    # vLLM 0.5-0.6 decodes an fp8 KV cache with its PagedAttention kernel, one thread block per query
    # head (csrc/attention/attention_kernels.cu: dim3 grid(num_heads, num_seqs, ...)); FlashAttention-2
    # packs a KV head's query heads into one tile. Attention's compute term is FLOPs / (R x eta x r /
    # (r + M)) with r tile rows: by hand, the per-head kernel adds FLOPs / (R eta) x ((1 + M) - (g + M) / g).
    from dfvg_dse.costs.processor import engine_rates, engine_roofline
    from dfvg_dse.costs.work import forward_work

    plain = catalog.with_engine("roofline")
    model = catalog.model("llama-3.1-8b").with_dtypes("fp8", "fp8")
    group = model.query_heads_per_kv
    assert group == 4  # 32 query heads over 8 KV heads (Llama-3.1-8B config.json)
    packed = dataclasses.replace(KNOWN, kernels=KNOWN.kernels + (KernelEfficiency("fp8", 0.8, 0.6),), half_rows=7.0)
    per_head = dataclasses.replace(packed, per_head_attention=("fp8",))
    device = dataclasses.replace(plain.device("h100-sxm"), engine=packed)
    work = forward_work(model, 1, 2048, 16)
    rate, _ = engine_rates(model, device, packed)
    a = engine_roofline(model, device, work, packed, 16)
    b = engine_roofline(model, device, work, per_head, 16)
    by_hand = float(work.attention_flops) / (rate * packed.attention_efficiency) * ((1 + 7.0) - (group + 7.0) / group)
    assert float(b.compute_time_s - a.compute_time_s) == pytest.approx(by_hand, rel=1e-9)
    assert float(b.time_s) > float(a.time_s)
    # a 16-bit cache under the same profile keeps the packed tile; so does a model with no GQA group
    sixteen = catalog.model("llama-3.1-8b").with_dtypes("fp8", "float16")
    w16 = forward_work(sixteen, 1, 2048, 16)
    assert float(engine_roofline(sixteen, device, w16, per_head, 16).time_s) == float(
        engine_roofline(sixteen, device, w16, packed, 16).time_s)
    mha = catalog.model("llama-2-7b").with_dtypes("fp8", "fp8")
    wm = forward_work(mha, 1, 2048, 16)
    assert float(engine_roofline(mha, device, wm, per_head, 16).time_s) == float(
        engine_roofline(mha, device, wm, packed, 16).time_s)
    # MLA's absorbed kernels share one latent over every head: no engine runs them per head
    mla = catalog.model("deepseek-v3").with_dtypes("fp8", "fp8")
    assert per_head.query_heads_per_tile(mla) == mla.n_heads == packed.query_heads_per_tile(mla)
    wl = forward_work(mla, 1, 4096, 64)
    assert float(engine_roofline(mla, device, wl, per_head, 64).time_s) == float(
        engine_roofline(mla, device, wl, packed, 64).time_s)


def test_the_fit_tiles_the_rows_of_a_per_head_kernel_as_the_cost_model_does(catalog):
    from dfvg_dse.validation.engines import features as fit_features

    plain = catalog.with_engine("roofline")
    row = ForwardMeasurement("s", "w", "vllm", "h100-sxm", "llama-3.1-8b", "fp8", 16, "decode", 128, 129, "ms", 1.0,
                             kv_dtype="fp8")
    models, devices = {"llama-3.1-8b": plain.model("llama-3.1-8b")}, {"h100-sxm": plain.device("h100-sxm")}
    packed = fit_features([row], models, devices)
    per_head = fit_features([row], models, devices, per_head_attention=frozenset({("vllm", "fp8")}))
    other = fit_features([dataclasses.replace(row, engine="trtllm")], models, devices,
                         per_head_attention=frozenset({("vllm", "fp8")}))
    assert set(packed.attention_rows) == {4.0} and set(other.attention_rows) == {4.0}
    assert set(per_head.attention_rows) == {1.0}
    # the KV cache's class decides, not the weights'
    facts = frozenset({("vllm", "fp8")})
    kv_only = fit_features([dataclasses.replace(row, dtype="float16")], models, devices, per_head_attention=facts)
    weights_only = fit_features([dataclasses.replace(row, kv_dtype="float16")], models, devices, per_head_attention=facts)
    assert set(kv_only.attention_rows) == {1.0} and set(weights_only.attention_rows) == {4.0}


def test_the_fit_prices_per_head_rows_as_the_cost_model_does(catalog):
    # rows 'measured' under a profile whose fp8 KV cache runs per query head: the fit, told the
    # fact, recovers them, and its profile priced through the cost model gives what the fit predicts
    # (a fit that tiled these rows by the GQA group would not: 4 rows per tile against the model's 1)
    truth = dataclasses.replace(KNOWN, kernels=KNOWN.kernels + (KernelEfficiency("fp8", 0.8, 0.6),), half_rows=7.0,
                                per_head_attention=("fp8",))
    rows, times = [], []
    for row in _synthetic_rows(catalog, truth, "s1", "vllm")[0]:
        row = dataclasses.replace(row, kv_dtype="fp8")
        spec = catalog.model(row.model).with_dtypes(row.dtype, "fp8").with_quantisation(row.group_size)
        (tokens, context, _), = row.priced_forwards
        seconds = float(processor_forward_cost(spec, dataclasses.replace(catalog.device(row.device), engine=truth),
                                               tokens, context, row.batch).time_s)
        rows.append(dataclasses.replace(row, value=seconds * 1e3))
        times.append(seconds)
    plain = catalog.with_engine("roofline")
    f = features(rows, {r.model: plain.model(r.model) for r in rows}, {r.device: plain.device(r.device) for r in rows},
                 per_head_attention=frozenset({("vllm", "fp8")}))
    fit = fit_engines(f)
    assert np.median(np.abs(fit.predict(f) / times - 1)) < 0.03  # the priors (toward pooled, defaults) bias a little
    profile = fit.profile("vllm", "test", per_head_attention=("fp8",))
    for row, predicted in zip(rows, fit.predict(f)):
        spec = catalog.model(row.model).with_dtypes(row.dtype, "fp8").with_quantisation(row.group_size)
        gpu = dataclasses.replace(catalog.device(row.device), engine=profile)
        (tokens, context, _), = row.priced_forwards
        assert float(processor_forward_cost(spec, gpu, tokens, context, row.batch).time_s) == pytest.approx(predicted,
                                                                                                             rel=1e-9)


def test_the_per_head_attention_fact_reads_back_and_a_bad_one_is_one_line(tmp_path, catalog):
    from dfvg_dse.catalog.engines import engine_document, parse_engine
    from dfvg_dse.catalog.errors import DataError

    path = tmp_path / "synthetic.toml"
    document = engine_document(dataclasses.replace(KNOWN, source="test", per_head_attention=("fp8",)), "S",
                               {"rows": 1}, "t", "m", "the kernel's grid")
    assert document["per_head_attention"] == {"kv_classes": ["fp8"], "source": "the kernel's grid"}
    assert parse_engine(path, document).per_head_attention == ("fp8",)
    assert parse_engine(path, {k: v for k, v in document.items() if k != "per_head_attention"}).per_head_attention == ()
    for bad in ({"kv_classes": "fp8", "source": "x"}, {"kv_classes": ["fp8"]}, {"kv_classes": ["fp8"], "source": " "},
                {"kv_classes": ["fp9"], "source": "x"}, {"kv_classes": ["fp8", "fp8"], "source": "x"},
                {"kv_classes": [8], "source": "x"}, {"kv_classes": [], "source": "x", "extra": 1}):
        with pytest.raises(DataError) as err:
            parse_engine(path, {**document, "per_head_attention": bad})
        assert "per_head_attention" in str(err.value) and "\n" not in str(err.value)
    # the shipped facts: vLLM's fp8 cache runs per query head, with the code that says so; the others pack
    vllm = catalog.engine("vllm")
    assert vllm.per_head_attention == ("fp8",)
    assert "selector.py" in catalog.engine_entry("vllm")[1]["per_head_attention"]["source"]
    assert all(catalog.engine(e).per_head_attention == () for e in ("trtllm", "sglang", "llama.cpp", "gpt-fast", "hf"))


def test_show_names_the_sources_and_engine_versions_a_profile_was_fitted_to(run, catalog):
    # a user compares their deployment's release with the ones the profile describes
    shown = run("engines", "show", "trtllm")
    assert shown.exit_code == 0, shown.stderr
    fitted = catalog.engine_entry("trtllm")[1]["fitted"]["sources"]
    by_id = {s.id: s for s in catalog.measurements()}
    assert len(fitted) == 5
    for source in fitted:  # every source's line carries its stated version, read from its own file
        line = next(x for x in shown.stdout.splitlines() if x.startswith(source + " "))
        assert by_id[source].engine_version in line and by_id[source].engine == "trtllm"
    record = json.loads(run("engines", "show", "vllm", "--json").stdout)
    assert record["source_versions"] == {s: by_id[s].engine_version for s in record["fitted"]["sources"]}
    assert "fitted to source" not in run("engines", "show", "sglang").stdout  # borrowed: no rows of its own
