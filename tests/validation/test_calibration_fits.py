"""Calibration fits recover known parameters; the cost-model terms calibration added behave as
defined and leave every shipped device unchanged; calibrated hwdb entries read back."""

import dataclasses

import numpy as np
import pytest

from dfvg_dse.catalog import Catalog
from dfvg_dse.catalog.hwdocs import core_document, link_document
from dfvg_dse.catalog.lookup import write_toml_atomic
from dfvg_dse.catalog.errors import CatalogError
from dfvg_dse.costs.processor import linear_row_ratio, processor_forward_cost
from dfvg_dse.costs.stages import tree_draft_time_s, tree_verify_cost
from dfvg_dse.costs.work import forward_work
from dfvg_dse.reference.microbench import linear_row_times
from dfvg_dse.reference.stages import RunResult
from dfvg_dse.specs import ModelSpec
from dfvg_dse.validation.calibrate import core_device, fit_core, fit_link, stage_records

TARGET = ModelSpec(name="t", family="llama", n_layers=4, d_model=256, n_heads=4, n_kv_heads=4, head_dim=64, d_ffn=688,
                   vocab_size=256, max_positions=1024, tied_embeddings=True, weight_dtype="float32",
                   kv_dtype="float32")
DRAFT = dataclasses.replace(TARGET, name="d", n_layers=1, d_model=128, n_heads=2, n_kv_heads=2, d_ffn=344)
PEAK = 166e9
TRUE = {"eta_compute": 0.3, "bandwidth_bytes_per_s": 2.5e10, "forward_overhead_s": 6e-5, "layer_overhead_s": 4e-5,
        "multi_row_bandwidth_fraction": 0.55, "compute_memory_overlap": 0.2}


def test_fit_recovers_the_parameters_that_made_the_times():
    # autoregressive steps (1 token) and tree verifications (more), which also pay the round's fixed work
    device = core_device("truth", PEAK, {**TRUE, "verify_round_overhead_s": 1e-4}, "test")
    records = [{"model": "target", "tokens": n, "context": c,
                "seconds": float(tree_verify_cost(TARGET, device, n - 1, None, c).time_s if n > 1 else
                                 processor_forward_cost(TARGET, device, n, c).time_s)}
               for n in (1, 2, 3, 4, 6, 8, 12, 16, 32, 64) for c in (32, 256)]
    fit = fit_core(records, TARGET, PEAK, "fitted", "test")
    assert fit.rms_relative_error < 1e-3
    assert fit.issues == ()  # nothing at a bound, a small error: nothing to report
    assert fit.device.verify_round_overhead_s == pytest.approx(1e-4, rel=0.1)
    for name in ("eta_compute", "bandwidth_bytes_per_s", "multi_row_bandwidth_fraction"):
        field = "memory" if name == "bandwidth_bytes_per_s" else name
        got = fit.device.main_memory.bandwidth_bytes_per_s if field == "memory" else getattr(fit.device, name)
        assert got == pytest.approx(TRUE[name], rel=0.05)


def test_draft_fit_separates_the_round_overhead_from_the_levels():
    device = core_device("truth", PEAK, {**TRUE, "draft_round_overhead_s": 1.5e-4}, "test")
    shapes = [(1,), (1, 1, 1), (1,) * 6, (3, 9), (2, 4, 8)]
    records = [{"model": "draft", "widths": w, "context": c,
                "seconds": float(tree_draft_time_s(DRAFT, device, w, c)[0])} for w in shapes for c in (64, 192)]
    fit = fit_core(records, DRAFT, PEAK, "fitted", "test")
    assert fit.rms_relative_error < 0.02
    assert fit.device.draft_round_overhead_s == pytest.approx(1.5e-4, rel=0.2)


def test_link_fit_is_the_straight_line_through_the_points():
    records = [{"bytes": b, "seconds": 8e-6 + b / 3e9} for b in (16, 256, 4096, 65536)]
    fit = fit_link(records, "pipe", "test")
    assert fit.link.latency_s == pytest.approx(8e-6) and fit.link.bandwidth_bytes_per_s == pytest.approx(3e9)
    assert fit.rms_relative_error < 1e-9 and fit.issues == ()


def test_calibrated_terms_do_what_they_say():
    base = core_device("x", PEAK, {**TRUE, "multi_row_bandwidth_fraction": 1.0, "compute_memory_overlap": 1.0}, "t")
    roofline = processor_forward_cost(TARGET, base, 4, 100)
    additive = processor_forward_cost(TARGET, dataclasses.replace(base, compute_memory_overlap=0.0), 4, 100)
    c, m = float(roofline.compute_time_s), float(roofline.memory_time_s)
    overhead = base.forward_overhead_s + 4 * base.layer_overhead_s
    assert float(roofline.time_s) == pytest.approx(max(c, m) + overhead)
    assert float(additive.time_s) == pytest.approx(c + m + overhead)
    slow = dataclasses.replace(base, multi_row_bandwidth_fraction=0.5)
    assert float(processor_forward_cost(TARGET, slow, 1, 100).time_s) == float(processor_forward_cost(TARGET, base, 1, 100).time_s)
    assert float(processor_forward_cost(TARGET, slow, 2, 100).memory_time_s) == pytest.approx(
        2 * float(processor_forward_cost(TARGET, base, 2, 100).memory_time_s))
    per_round = dataclasses.replace(base, draft_round_overhead_s=1e-4)
    assert float(tree_draft_time_s(DRAFT, per_round, (1, 1, 1), 50)[0]) == pytest.approx(
        float(tree_draft_time_s(DRAFT, base, (1, 1, 1), 50)[0]) + 1e-4)


def test_shipped_devices_keep_the_plain_roofline():
    catalog = Catalog.open()
    for entry in catalog.hw_entries("gpu") + catalog.hw_entries("cpu") + catalog.hw_entries("fpga"):
        spec = entry.spec
        assert spec.compute_memory_overlap == 1.0 and spec.multi_row_bandwidth_fraction == 1.0
        assert spec.draft_round_overhead_s == 0.0


def test_stage_records_group_real_runs_by_shape():
    trace = [{"parents": [-1, 0, 1], "ranks": [0, 0, 0], "accepted": [0, 1], "draft_start_s": 0.0, "draft_end_s": 2e-4,
              "verify_start_s": 3e-4, "verify_end_s": 1.3e-3},
             {"parents": [-1, 0, 1], "ranks": [0, 0, 0], "accepted": [0], "draft_start_s": 2e-3, "draft_end_s": 2.4e-3,
              "verify_start_s": 2.5e-3, "verify_end_s": 3.5e-3}]
    runs = [RunResult([1] * 4, 0.01, trace=trace), RunResult([1] * 3, 0.01, step_s=[5e-4, 7e-4])]
    records = stage_records(runs, [10, 10])
    verify = [r for r in records if r["model"] == "target" and r["tokens"] == 3]
    assert verify == [{"model": "target", "tokens": 3, "context": 32, "seconds": pytest.approx(1e-3), "count": 2}]
    draft = [r for r in records if r["model"] == "draft"]
    assert draft[0]["widths"] == (1, 1) and draft[0]["seconds"] == pytest.approx(3e-4) and draft[0]["count"] == 2
    steps = [r for r in records if r["model"] == "target" and r["tokens"] == 1]
    assert steps[0]["seconds"] == pytest.approx(6e-4) and steps[0]["count"] == 2


def test_calibrated_entries_read_back_through_the_catalog(tmp_path):
    device = dataclasses.replace(core_device("local-core-0", PEAK, {**TRUE, "draft_round_overhead_s": 2e-5}, "t"))
    write_toml_atomic(tmp_path / "cpu" / "local-core-0.toml", core_document(device, 2.6e9, "cpuinfo", "fit", "host"))
    fit = fit_link([{"bytes": b, "seconds": 8e-6 + b / 3e9} for b in (16, 4096)], "local-pipe", "t")
    write_toml_atomic(tmp_path / "link" / "local-pipe.toml", link_document(fit.link, "fit"))
    catalog = Catalog.open(hwdb_dir=tmp_path)
    back = catalog.device("local-core-0")
    for name in ("eta_compute", "forward_overhead_s", "layer_overhead_s", "compute_memory_overlap",
                 "multi_row_bandwidth_fraction", "draft_round_overhead_s"):
        assert getattr(back, name) == pytest.approx(getattr(device, name))
    assert back.peak_for("fp32") == pytest.approx(PEAK)
    assert back.main_memory.achieved_bandwidth_bytes_per_s == pytest.approx(TRUE["bandwidth_bytes_per_s"])
    link = catalog.link("local-pipe")
    assert link.latency_s == pytest.approx(8e-6) and link.bandwidth_bytes_per_s == pytest.approx(3e9)
    assert np.isclose(link.hops, 1)


# Measured on this project's 2-core Zen 4 machine (linear layers of builtin:tiny's target, one thread):
# 3 rows slower than 4, 12 rows a jump where the small-matrix kernel's column blocks begin.
RATIOS = (1.0, 1.8, 2.56, 1.94, 2.4, 2.57, 3.03, 2.45, 3.12, 3.11, 3.71, 5.61, 6.23, 6.42, 6.8, 6.13)


def test_linear_row_ratio_is_the_table_then_whole_blocks_of_its_last_row_count():
    rows = np.arange(1, 60)
    brute = []
    for n in rows:  # the decomposition done by hand: as many 16-row blocks as fit, then the rest
        total, left = 0.0, int(n)
        while left >= len(RATIOS):
            total, left = total + RATIOS[-1], left - len(RATIOS)
        brute.append(total + (RATIOS[left - 1] if left else 0.0))
    assert linear_row_ratio(RATIOS, rows) == pytest.approx(brute)


def test_measured_row_ratios_scale_the_weight_stream_and_replace_the_multi_row_fraction():
    base = core_device("x", PEAK, {**TRUE, "compute_memory_overlap": 0.0}, "t")
    measured = core_device("x", PEAK, {**TRUE, "compute_memory_overlap": 0.0}, "t", RATIOS)
    for n in (1, 3, 4, 13, 40):
        work = forward_work(TARGET, n, 100)
        want = (float(work.weight_bytes) * float(linear_row_ratio(RATIOS, n))
                + float(work.kv_read_bytes + work.kv_write_bytes)) / TRUE["bandwidth_bytes_per_s"]
        cost = processor_forward_cost(TARGET, measured, n, 100)
        assert float(cost.memory_time_s) == pytest.approx(want)
        # the ratios time the linear layers whole: only attention's products stay in the compute term
        assert float(cost.compute_time_s) < float(processor_forward_cost(TARGET, base, n, 100).compute_time_s)
    three, four = (float(processor_forward_cost(TARGET, measured, n, 100).time_s) for n in (3, 4))
    assert three > four  # the uneven kernels, which no smooth function of rows gives


def test_fit_with_measured_row_ratios_recovers_the_rest():
    truth = {k: v for k, v in TRUE.items() if k != "multi_row_bandwidth_fraction"}
    device = core_device("truth", PEAK, truth, "test", RATIOS)
    records = [{"model": "target", "tokens": n, "context": c,
                "seconds": float(processor_forward_cost(TARGET, device, n, c).time_s)}
               for n in (1, 2, 4, 7, 13) for c in (96, 160, 224)]
    fit = fit_core(records, TARGET, PEAK, "fitted", "test", RATIOS)
    assert fit.rms_relative_error < 1e-3
    assert fit.device.linear_row_ratios == RATIOS and fit.device.multi_row_bandwidth_fraction == 1.0
    assert fit.device.main_memory.bandwidth_bytes_per_s == pytest.approx(TRUE["bandwidth_bytes_per_s"], rel=0.02)
    # a verify of 3 or 5 rows, which no calibration record had, priced as the truth prices it
    for n in (3, 5):
        assert float(processor_forward_cost(TARGET, fit.device, n, 128).time_s) == pytest.approx(
            float(processor_forward_cost(TARGET, device, n, 128).time_s), rel=0.01)


def test_row_ratios_read_back_and_bad_tables_are_refused(tmp_path):
    device = core_device("local-core-0", PEAK, TRUE, "t", RATIOS)
    path = tmp_path / "cpu" / "local-core-0.toml"
    document = core_document(device, 2.6e9, "cpuinfo", "fit", "host")
    write_toml_atomic(path, document)
    assert Catalog.open(hwdb_dir=tmp_path).device("local-core-0").linear_row_ratios == RATIOS
    table = document["linear_row_ratios"]
    for bad, field in (({**table, "values": [2.0, 3.0]}, "linear_row_ratios"),
                       ({**table, "values": []}, "linear_row_ratios.values"),
                       ({**table, "values": [1.0, "x"]}, "linear_row_ratios.values"),
                       ({**table, "values": [1.0, float("nan")]}, "linear_row_ratios"),
                       ({**table, "unit": "ratio"}, "linear_row_ratios.unit"),
                       ({k: v for k, v in table.items() if k != "source"}, "linear_row_ratios.source"),
                       ([1.0, 2.0], "linear_row_ratios")):
        write_toml_atomic(path, {**document, "linear_row_ratios": bad})
        with pytest.raises(CatalogError) as err:
            Catalog.open(hwdb_dir=tmp_path).device("local-core-0")
        assert f"'{field}'" in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.torch
def test_linear_row_times_measures_torchs_bfloat16_products_for_the_torch_backend():
    """The torch backend's weights are timed with torch's own products in their dtype (issue 19), every
    row count measured (what `calibrate --backend torch` fits the verify core's row ratios to)."""
    pytest.importorskip("torch")
    from dfvg_dse.reference import pack_weights, random_weights
    from dfvg_dse.reference.torch_lm import TorchWeights
    from dfvg_dse.reference.tiny_lm import ReferenceConfig
    from dfvg_dse.specs.backend import ReferenceBackend

    import multiprocessing
    from dfvg_dse.reference import microbench, torch_lm

    config = ReferenceConfig(DRAFT)
    weights = TorchWeights(pack_weights(random_weights(DRAFT, seed=0), config), ReferenceBackend("torch", "bfloat16"))
    seconds = linear_row_times(weights, max_rows=4, repeats=3, cpu=None)
    assert len(seconds) == 4 and all(0.0 < s < 1.0 for s in seconds)
    # in this process, the timing loop takes torch's runner (its products in bfloat16), not numpy's
    used = []
    original = torch_lm.linear_pass_runner

    def recording(w):
        inputs, run = original(w)
        used.append(inputs(2)[DRAFT.d_model].dtype)
        return inputs, run
    torch_lm.linear_pass_runner = recording
    try:
        mine, theirs = multiprocessing.Pipe()
        microbench._time_linears(weights, 2, 1, None, theirs)
        assert len(mine.recv()) == 2
    finally:
        torch_lm.linear_pass_runner = original
    assert [str(d) for d in used] == ["torch.bfloat16"]


def test_linear_row_times_measures_the_engine_products_on_one_core():
    from dfvg_dse.reference import pack_weights, random_weights
    from dfvg_dse.reference.tiny_lm import ReferenceConfig

    config = ReferenceConfig(DRAFT)
    weights = pack_weights(random_weights(DRAFT, seed=0), config)
    seconds = linear_row_times(weights, max_rows=4, repeats=2, cpu=None)
    assert len(seconds) == 4 and all(0.0 < s < 1.0 for s in seconds)
