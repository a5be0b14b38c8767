"""Every shipped entry loads, carries provenance, and matches published figures."""

import math
import os

import pytest

from dfvg_dse.catalog import Catalog, CatalogError
from dfvg_dse.costs import param_counts

REQUIRED_FPGAS = {"v80", "u200", "u250", "u280", "u55c", "vck5000", "vhk158", "v70", "agilex-7-agm039"}
# issue 17, item 3 ("Catalog"): Blackwell Ultra, consumer Blackwell, the L40, the PCIe A100, AMD CDNA 3/4, Gaudi 3
NEW_GPUS = {"b300", "rtx-5090", "l40", "a100-80gb-pcie", "mi300x", "mi325x", "mi355x", "gaudi3"}
REQUIRED_GPUS = {"rtx-4090", "rtx-3090", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l40s", "l4",
                 "a10"} | NEW_GPUS
REQUIRED_CPUS = {"xeon-silver-4310", "xeon-8480plus", "epyc-9654"}
REQUIRED_MODELS = {
    "opt-125m", "opt-350m", "opt-1.3b", "opt-6.7b", "opt-13b", "opt-30b", "llama-68m", "llama-160m", "vicuna-160m",
    "llama-2-7b", "llama-2-13b", "llama-2-70b", "vicuna-7b", "vicuna-13b", "vicuna-33b", "llama-3.1-8b",
    "llama-3.1-70b", "llama-3.2-1b", "qwen2.5-0.5b", "qwen2.5-7b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",
    "qwen3-8b", "qwen3-14b", "qwen3-32b", "mistral-7b"}


def test_database_holds_the_required_entries(catalog):
    assert REQUIRED_FPGAS <= set(catalog.hw_names("fpga"))
    assert any(n.startswith(("stratix", "agilex")) for n in catalog.hw_names("fpga"))  # one Intel part
    assert REQUIRED_GPUS <= set(catalog.hw_names("gpu"))
    assert REQUIRED_CPUS <= set(catalog.hw_names("cpu"))
    assert REQUIRED_MODELS <= set(catalog.model_names())
    links = [catalog.link(n) for n in catalog.hw_names("link")]
    pcie = {(l.name.split("-")[1], l.name.split("-")[2], l.path) for l in links if l.link_type == "pcie"}
    paths = ("host-staged", "peer-to-peer")
    widths = ("x16", "x8")
    assert pcie == ({(gen, width, path) for gen in ("gen3", "gen4", "gen5") for width in widths for path in paths}
                    | {("gen6", "x16", path) for path in paths})
    # PCIe per-lane, per-direction rates; Gen6: 64 GT/s, 242 of each 256-byte flit past CRC and FEC (PCIe 6.0)
    per_lane = {"gen3": 0.985e9, "gen4": 1.969e9, "gen5": 3.938e9, "gen6": 64e9 / 8 * 242 / 256}
    for link in links:
        if link.link_type == "pcie":
            gen, width = link.name.split("-")[1:3]
            assert link.bandwidth_bytes_per_s == pytest.approx(per_lane[gen] * int(width[1:]), rel=0.01)
            assert link.hops == (2 if link.path == "host-staged" else 1)
    assert {l.link_type for l in links} >= {"pcie", "cxl", "nvlink", "ethernet-rdma", "infinity-fabric", "infiniband"}


def test_scale_out_and_scale_up_links_are_per_direction(catalog):
    # InfiniBand NDR/XDR and 400GbE: the port's data rate in bits, once per direction (IBTA roadmap; IEEE 802.3bs)
    for name, gbit in (("infiniband-ndr", 400), ("infiniband-xdr", 800), ("ethernet-400g-rdma", 400)):
        assert catalog.link(name).bandwidth_bytes_per_s == pytest.approx(gbit * 1e9 / 8), name
    # xGMI: seven links per GPU of 128 GB/s (MI300X) and 153.6 GB/s (MI355X) counted both ways
    for name, per_link_bidir in (("xgmi-mi300", 128e9), ("xgmi-mi355x", 153.6e9)):
        assert catalog.link(name).bandwidth_bytes_per_s == pytest.approx(7 * per_link_bidir / 2), name
    assert catalog.link("gaudi3-roce-scaleup").bandwidth_bytes_per_s == pytest.approx(21 * 200e9 / 8)


def test_every_hw_entry_loads_with_provenance_on_every_number(catalog):
    for entry in catalog.hw_entries():
        assert entry.quantities, entry.path
        for field, q in entry.quantities.items():
            assert q.source.strip() and q.tag in ("datasheet", "measured", "paper", "derived", "unverified"), field
            assert math.isfinite(q.si)


def test_host_links_name_existing_links(catalog):
    links = set(catalog.hw_names("link"))
    for entry in catalog.hw_entries():
        if entry.kind != "link" and entry.spec.host_link is not None:
            assert entry.spec.host_link in links, entry.path
        if entry.kind == "gpu":  # every shipped GPU can form a group (4xNAME, --tp)
            assert entry.spec.peer_link in links and entry.spec.device_class, entry.path


@pytest.mark.parametrize("name", sorted(NEW_GPUS))
def test_each_new_gpu_loads_with_its_fp8_peak_where_it_has_one(catalog, name):
    gpu = catalog.device(name)
    peaks = dict(gpu.peak_flops_per_s)
    assert ("fp8" in peaks) == (name in FP8_GPUS), name
    if "fp8" in peaks:
        assert gpu.compute_peak("fp8") == (peaks["fp8"], "fp8", "fp8")  # priced at its own rate, no fallback
    assert catalog.link(gpu.host_link).name == gpu.host_link and catalog.link(gpu.peer_link).name == gpu.peer_link


def test_every_model_loads_with_source(catalog):
    for entry in catalog.model_entries():
        assert entry.spec.source.strip()
        assert entry.tag in ("datasheet", "measured", "paper", "derived", "unverified")


# Published parameter counts the issue names: LLaMA-2-7B (6.74e9), OPT-13B (12.85e9), Qwen3-8B (8.19e9).
@pytest.mark.parametrize("name, published", [("llama-2-7b", 6.74e9), ("opt-13b", 12.85e9), ("qwen3-8b", 8.19e9)])
def test_parameter_counts_match_published_sizes_within_one_percent(catalog, name, published):
    total = param_counts(catalog.model(name)).total
    assert abs(total / published - 1) < 0.01


def _rounding_tolerance(value: float) -> float:
    """Half a unit in the last printed digit of a published count (e.g. '1.7B' -> 0.05e9 / 1.7e9)."""
    mantissa = f"{value:.6e}".split("e")[0].rstrip("0").rstrip(".")
    digits = len(mantissa.replace(".", "").lstrip("0"))
    return 0.5 * 10 ** (math.floor(math.log10(value)) - digits + 1) / value


def test_every_published_count_in_the_data_is_reproduced(catalog):
    checked = 0
    for entry in catalog.model_entries():
        if entry.published_params is None:
            continue
        published = entry.published_params.si
        tolerance = max(0.01, _rounding_tolerance(published))
        assert abs(param_counts(entry.spec).total / published - 1) <= tolerance, entry.spec.name
        checked += 1
    assert checked >= 10


def test_rounding_tolerance_reads_printed_digits():
    assert math.isclose(_rounding_tolerance(1.7e9), 0.05 / 1.7)
    assert math.isclose(_rounding_tolerance(8.19e9), 0.005 / 8.19)


def test_dfvg_paper_table_3_shapes(catalog):
    # DFVG (ASPLOS 2026) Table 3: hidden, FFN, layers, vocab of the four pairs.
    table3 = {"vicuna-7b": (4096, 11008, 32, 32000), "vicuna-160m": (768, 3072, 12, 32000),
              "llama-2-7b": (4096, 11008, 32, 32000), "llama-160m": (768, 3072, 12, 32000),
              "opt-13b": (5120, 20480, 40, 50272), "opt-125m": (768, 3072, 12, 50272),
              "qwen3-8b": (4096, 12288, 36, 151936), "qwen3-0.6b": (1024, 3072, 28, 151936)}
    for name, shape in table3.items():
        spec = catalog.model(name)
        assert (spec.d_model, spec.d_ffn, spec.n_layers, spec.vocab_size) == shape, name


def test_dfvg_platform_figures(catalog):
    # DFVG (ASPLOS 2026) Table 2; V80 HBM 819.2 GB/s = 2 stacks x 8 channels x 128 bit x 3.2 GT/s (AMD PG313).
    v80 = catalog.device("v80")
    assert v80.main_memory.bandwidth_bytes_per_s == pytest.approx(819.2e9)
    assert v80.fpga.clock_hz == 300e6 and v80.decode_power_w == 75 and v80.tdp_w == 190
    rtx = catalog.device("rtx-4090")
    assert rtx.decode_power_w == 236 and rtx.peak_for("fp16") == pytest.approx(165.2e12)
    assert catalog.link("pcie-gen4-x16-host-staged").bandwidth_bytes_per_s == pytest.approx(31.5e9, rel=0.01)


def test_defaults_follow_the_cost_model_doc(catalog):  # docs/cost-model.md §6
    d = catalog.defaults()
    assert d.eta_for("fpga_hbm_bandwidth") == 0.65 and d.eta_for("link") == 0.80
    assert d.power_fraction_for("gpu_decode_fraction") == 0.5 and d.token_record_bytes == 16


# Matrix units with FP8: Hopper, Ada, Blackwell, CDNA 3/4, Gaudi 3; Ampere has none. FP4: Blackwell and CDNA 4 (MXFP4).
FP8_GPUS = {"h100-sxm", "h100-pcie", "h200", "h20", "l4", "l40s", "l40", "rtx-4090", "rtx-5090", "b200", "b300",
            "mi300x", "mi325x", "mi355x", "gaudi3"}
NO_FP8_GPUS = {"a100-40gb", "a100-80gb", "a100-80gb-pcie", "a10", "rtx-3090", "rtx-a6000"}
FP4_GPUS = {"b200", "b300", "rtx-5090", "mi355x"}
FP8_AT_16BIT_RATE = {"gaudi3"}  # Gaudi 3's MME: 1,835 TFLOPS in FP8 and BF16 alike (Intel Gaudi 3 white paper)


def test_fp8_and_fp4_peaks_exist_where_the_silicon_has_them(catalog):
    assert FP8_GPUS | NO_FP8_GPUS == set(catalog.hw_names("gpu"))
    for name in FP8_GPUS | NO_FP8_GPUS:
        peaks = dict(catalog.device(name).peak_flops_per_s)
        assert ("fp8" in peaks) == (name in FP8_GPUS), name
        assert ("fp4" in peaks) == (name in FP4_GPUS), name
        if "fp8" in peaks:  # each halving of the operand width doubles the dense tensor rate on these parts
            ratio = 1 if name in FP8_AT_16BIT_RATE else 2
            assert peaks["fp8"] == pytest.approx(ratio * peaks["fp16"], rel=0.03), name
        if "fp4" in peaks:  # at least twice FP8 again (B300 and the GeForce FP32-accumulate FP8 rate: more)
            assert peaks["fp4"] >= 2 * peaks["fp8"] * 0.97, name
    b200 = dict(catalog.device("b200").peak_flops_per_s)
    assert b200["fp4"] == pytest.approx(2 * b200["fp8"]) and "fp32" not in b200


def test_lookup_is_exact_and_suggests_close_names(catalog):
    from dfvg_dse.catalog import UnknownNameError
    with pytest.raises(UnknownNameError, match=r"unknown device 'rtx4090'; did you mean rtx-4090"):
        catalog.device("rtx4090")
    with pytest.raises(UnknownNameError, match=r"^unknown model 'llama-2-7'; did you mean llama-2-7b.*; known: "):
        catalog.model("llama-2-7")
    with pytest.raises(UnknownNameError, match=r"unknown link 'v80' \('v80' is a fpga entry\)"):
        catalog.link("v80")  # a device is not a link


def test_search_path_is_option_or_env_then_user_then_shipped(tmp_path, monkeypatch, catalog):
    from dfvg_dse.catalog import shipped_data_dir, user_data_dir
    shipped = shipped_data_dir("models")
    (tmp_path / "m").mkdir()
    (tmp_path / "e").mkdir()
    assert Catalog.open().models_dirs == (shipped,)
    assert Catalog.open(tmp_path / "m").models_dirs == (tmp_path / "m", shipped)
    monkeypatch.setenv("DFVG_DSE_MODELS_DIR", f"{tmp_path / 'e'}{os.pathsep}{tmp_path / 'm'}")
    assert Catalog.open().models_dirs == (tmp_path / "e", tmp_path / "m", shipped)
    assert Catalog.open(tmp_path / "m").models_dirs == (tmp_path / "m", shipped)  # the option beats the env
    monkeypatch.delenv("DFVG_DSE_MODELS_DIR")
    user_data_dir("models").mkdir(parents=True)
    assert Catalog.open().models_dirs == (user_data_dir("models"), shipped)
    assert Catalog.open().import_dir == user_data_dir("models")


def test_user_entries_add_to_and_override_shipped_ones(tmp_path, catalog):
    mine = tmp_path / "mine"
    (mine / "gpu").mkdir(parents=True)
    text = (catalog.hwdb_dir / "gpu" / "rtx-4090.toml").read_text()
    (mine / "gpu" / "my-gpu.toml").write_text(text.replace('name = "rtx-4090"', 'name = "my-gpu"'))
    (mine / "gpu" / "rtx-4090.toml").write_text(text.replace("value = 236,", "value = 200,"))
    ours = Catalog.open(hwdb_dir=mine)
    assert "my-gpu" in ours.hw_names("gpu") and "a100-80gb" in ours.hw_names("gpu")
    assert ours.device("rtx-4090").decode_power_w == 200  # first match wins
    assert ours.defaults() == catalog.defaults()  # defaults.toml comes from the shipped data


def test_missing_directory_is_one_line(tmp_path):
    with pytest.raises(CatalogError, match=r"--hwdb-dir .*nowhere: no such directory"):
        Catalog.open(hwdb_dir=tmp_path / "nowhere")
