"""Hostile data files: devices and pipes, oversize and deeply nested files, lone surrogates, values of
the wrong type, implausible hardware numbers and names taken twice. Each ends in one line naming the
file (and the field), never in a traceback, a read that does not end, or a silently wrong answer."""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from dfvg_dse.catalog import Catalog, CatalogError, _io
from dfvg_dse.catalog.hardware import PLAUSIBLE
from dfvg_dse.specs import InputError

from cli_checks import one_line_error

PROFILE = "qwen3-8b__qwen3-0.6b.toml"
PROFILE_NAME = "qwen3-8b/qwen3-0.6b"
ROUND = '"parents": [-1], "ranks": [0], "accepted": [0]'  # the smallest valid trace round
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are a POSIX feature")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _one_line(err: pytest.ExceptionInfo, *needles: str) -> str:
    text = str(err.value)
    assert "\n" not in text and len(text) < 400, text
    for needle in needles:
        assert needle in text, text
    return text


# -- not a regular file ----------------------------------------------------------------------
@pytest.mark.parametrize("read", [
    lambda c, p: c.read_study(p), lambda c, p: c.read_trace(p), lambda c, p: c.acceptance(p),
    lambda c, p: c.tree_document(p), lambda c, p: c.read_reference_prompts(p),
])
def test_a_device_is_refused_before_reading(catalog, read):
    with pytest.raises((CatalogError, InputError)) as err:
        read(catalog, os.devnull if os.name == "nt" else "/dev/zero")
    _one_line(err, "not a regular file")


@needs_fifo
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path, catalog):
    fifo = tmp_path / "study.toml"
    os.mkfifo(fifo)
    with pytest.raises((CatalogError, InputError)) as err:
        catalog.read_study(fifo)
    _one_line(err, str(fifo), "not a regular file (a named pipe)")
    with pytest.raises(CatalogError, match="not a regular file"):
        _io.read_toml(fifo)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_importing_dev_zero_ends_at_once():
    # In a child with a memory cap: a reader without the check reads /dev/zero until memory runs out.
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
            "from dfvg_dse.catalog import Catalog, CatalogError\n"
            "try:\n    Catalog.open().import_model('/dev/zero', 'zz', out_dir=sys.argv[1])\n"
            "except CatalogError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code, os.devnull], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "/dev/zero: not a regular file" in out.stdout, (out.stdout, out.stderr[-500:])


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_search_study_dev_zero_is_one_line(run):
    one_line_error(run("search", "--study", "/dev/zero"), "study", "/dev/zero", "not a regular file")


# -- size ------------------------------------------------------------------------------------
def test_an_oversize_data_file_is_refused_unread(tmp_path, catalog):
    study = tmp_path / "big.toml"
    with open(study, "wb") as handle:  # sparse: no disk or memory spent
        handle.truncate(_io.MAX_DATA_BYTES + 1)
    with pytest.raises(CatalogError) as err:
        catalog.read_study(study)
    _one_line(err, str(study), "larger than 16 MiB")
    tree = tmp_path / "big.json"
    shutil.copy(study, tree)
    with pytest.raises(CatalogError, match="larger than 16 MiB"):
        catalog.tree_document(str(tree))


def test_an_oversize_trace_is_refused(tmp_path, catalog, monkeypatch):
    monkeypatch.setattr(_io, "MAX_LINES_BYTES", 1000)
    trace = tmp_path / "t.jsonl"
    trace.write_text(("{" + ROUND + "}\n") * 40)
    with pytest.raises(CatalogError) as err:
        catalog.read_trace(trace)
    _one_line(err, str(trace), "the limit for a JSON Lines file")


# -- depth -----------------------------------------------------------------------------------
@pytest.mark.parametrize("levels", [200, 1200])  # 200 parses, then a deep copy would recurse too far
def test_deep_nesting_is_one_line(tmp_path, catalog, levels):
    study = tmp_path / "deep.toml"
    study.write_text("[space]\nx = " + "[" * levels + "]" * levels + "\n")
    with pytest.raises(CatalogError) as err:
        catalog.read_study(study)
    _one_line(err, str(study), "deeper than 64 levels")
    tree = tmp_path / "deep.json"
    tree.write_text('{"parents": ' + "[" * levels * 10 + "]" * levels * 10 + "}")
    with pytest.raises(CatalogError) as err:
        catalog.tree_document(str(tree))
    _one_line(err, str(tree), "deeper than 64 levels")
    trace = tmp_path / "deep.jsonl"
    trace.write_text("{" + ROUND + "}\n{" + ROUND + ', "x": ' + "[" * levels * 10 + "]" * levels * 10 + "}\n")
    with pytest.raises(CatalogError) as err:
        catalog.read_trace(trace)
    _one_line(err, f"{trace}:2", "deeper than 64 levels")


def test_deep_dotted_keys_and_deep_hwdb_entries(tmp_path, hwdb_copy):
    study = tmp_path / "dotted.toml"
    study.write_text("[models]\n" + ".".join(["k"] * 2000) + " = 1\n")
    with pytest.raises(CatalogError, match=r"field 'models\.k\.k.*deeper than 64"):
        Catalog.read_study(study)
    gpu = hwdb_copy / "gpu" / "l4.toml"
    gpu.write_text(gpu.read_text().replace('name = "l4"', 'notes = ' + "[" * 1500 + "]" * 1500 + '\nname = "l4"', 1))
    with pytest.raises(CatalogError) as err:
        Catalog.open(hwdb_dir=hwdb_copy).device("l4")
    _one_line(err, str(gpu), "deeper than 64 levels")


# -- lone surrogates -------------------------------------------------------------------------
def test_a_config_with_a_lone_surrogate_is_refused_at_read_time(tmp_path, catalog):
    config = json.loads((Path(__file__).parent / "config_llama_tiny.json").read_text())
    config["architectures"] = ["Llama\ud800"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))  # json escapes it: "\ud800", valid JSON, invalid Unicode
    with pytest.raises(CatalogError) as err:
        catalog.import_model(path, "sur", out_dir=tmp_path / "out")
    _one_line(err, str(path), "field 'architectures[0]'", "lone surrogate")
    assert not (tmp_path / "out").exists()
    path.write_text(json.dumps({**config, "architectures": [], "\udfff": 1}))
    with pytest.raises(CatalogError, match=r"field '\\udfff'.*lone surrogate"):
        catalog.import_model(path, "sur", out_dir=tmp_path / "out")


def test_surrogates_in_trees_and_traces_name_the_field(tmp_path, catalog):
    tree = tmp_path / "tree.json"
    tree.write_text('{"name": "x\\ud83d", "parents": [-1, 0]}')
    with pytest.raises(CatalogError) as err:
        catalog.tree_document(str(tree))
    _one_line(err, str(tree), "field 'name'", "lone surrogate")
    trace = tmp_path / "t.jsonl"
    trace.write_text("{" + ROUND + ', "meta": {"note": ["ok", "\\udc80"]}}\n')
    with pytest.raises(CatalogError) as err:
        catalog.read_trace(trace)
    _one_line(err, f"{trace}:1", "field 'meta.note[1]'", "lone surrogate")
    trace.write_text("{" + ROUND + ', "note": "\\ud83d\\ude00 a valid pair"}\n')
    assert catalog.read_trace(trace)[0][1]["note"].startswith("\U0001F600")


# -- acceptance profiles ---------------------------------------------------------------------
@pytest.mark.parametrize("key, value, field", [
    ("confidence.concentration", "abc", "confidence.concentration"),
    ("confidence.concentration", True, "confidence.concentration"),
    ("target", 5, "target"),
    ("draft", ["qwen3-0.6b"], "draft"),
    ("workload", {"a": 1}, "workload"),
    ("temperature", "hot", "temperature"),
    ("temperature", -1, "temperature"),
    ("rank", 0.8, "rank"),
    ("confidence", 0.8, "confidence"),
    ("rank.ci_low", 0.5, "rank.ci_low"),
    ("rank.ci_low", ["x"], "rank.ci_low[0]"),
    ("rank.ci_low", [0.5], "rank.ci_low"),
    ("rank.probs", [10 ** 400], "rank.probs[0]"),
    ("fit", 3, "fit"),
])
def test_profile_values_of_the_wrong_type(models_copy, run, key, value, field):
    path = models_copy / "pairs" / PROFILE
    document = tomllib.loads(path.read_text())
    *tables, last = key.split(".")
    table = document
    for name in tables:
        table = table[name]
    table[last] = value
    path.write_text(tomli_w.dumps(document))
    with pytest.raises(CatalogError) as err:
        Catalog.open(models_copy).profile(PROFILE_NAME)
    _one_line(err, str(path), f"field '{field}'")
    one_line_error(run("--models-dir", str(models_copy), "acceptance", "list"), PROFILE, f"field '{field}'")


@pytest.mark.parametrize("low, high, field", [
    (0.9, 0.7, "rank.ci_low[0]"),  # the review's case: an interval that does not hold p_1 = 0.8
    (0.7, 0.75, "rank.ci_high[0]"),
    (0.85, 0.9, "rank.ci_low[0]"),
])
def test_a_confidence_interval_must_hold_its_estimate(models_copy, run, low, high, field):
    path = models_copy / "pairs" / PROFILE
    document = tomllib.loads(path.read_text())
    probs = document["rank"]["probs"]
    assert probs[0] == 0.8
    document["rank"]["ci_low"] = [low] + probs[1:]
    document["rank"]["ci_high"] = [high] + probs[1:]
    path.write_text(tomli_w.dumps(document))
    with pytest.raises(CatalogError) as err:
        Catalog.open(models_copy).profile(PROFILE_NAME)
    _one_line(err, str(path), f"field '{field}'", "rank.probs[0] = 0.8")
    one_line_error(run("--models-dir", str(models_copy), "acceptance", "list"), PROFILE, f"field '{field}'")
    document["rank"]["ci_low"], document["rank"]["ci_high"] = [0.7] + probs[1:], [0.9] + probs[1:]
    path.write_text(tomli_w.dumps(document))  # bounds equal to the estimate are an interval that holds it
    assert Catalog.open(models_copy).profile(PROFILE_NAME).rank_probs[0] == 0.8


def test_profile_trace_values_of_the_wrong_type(models_copy):
    folder = models_copy / "pairs"
    (folder / "run.trace.jsonl").write_text(json.dumps({"ranks": 5}) + "\n")
    path = folder / PROFILE
    path.write_text(path.read_text() + '\n[trace]\nfile = "run.trace.jsonl"\nrun_tokens = 4\n')
    with pytest.raises(CatalogError) as err:
        Catalog.open(models_copy).profile(PROFILE_NAME)
    _one_line(err, "run.trace.jsonl:1", "field 'ranks'")


def test_two_profiles_with_one_name_in_one_folder_are_refused(models_copy):
    shutil.copy(models_copy / "pairs" / PROFILE, models_copy / "pairs" / "zz-copy.toml")
    with pytest.raises(CatalogError) as err:
        Catalog.open(models_copy).profile_names()
    _one_line(err, PROFILE_NAME, str(models_copy / "pairs" / PROFILE), str(models_copy / "pairs" / "zz-copy.toml"))


def test_a_profile_earlier_on_the_search_path_overrides_by_name(tmp_path, catalog):
    mine = tmp_path / "mine" / "pairs"
    mine.mkdir(parents=True)
    path = mine / "my-fit.toml"
    shutil.copy(catalog.models_dir / "pairs" / PROFILE, path)
    _edit(path, "    0.8,\n    0.091623,", "    0.7,\n    0.091623,")
    opened = Catalog.open(tmp_path / "mine")
    assert opened.profile(PROFILE_NAME).rank_probs[0] == 0.7
    assert opened.profile_names().count(PROFILE_NAME) == 1


# -- hardware: plausible ranges, DSP types, names, host links ---------------------------------
@pytest.mark.parametrize("file, old, new, field, shown", [
    ("fpga/v80.toml", 'clock = { value = 300, unit = "MHz"', 'clock = { value = 300, unit = "GHz"', "clock",
     "300 GHz"),
    ("gpu/rtx-4090.toml", 'bandwidth = { value = 1008, unit = "GB/s"', 'bandwidth = { value = 1008, unit = "TB/s"',
     "memory[0].bandwidth", "1008 TB/s"),
    ("gpu/rtx-4090.toml", 'peak_fp16 = { value = 165.2, unit = "TFLOPS"', 'peak_fp16 = { value = 1.652e6, unit = "TFLOPS"',
     "peak_fp16", "1.652e+06 TFLOPS"),
    ("gpu/rtx-4090.toml", 'tdp = { value = 450,', 'tdp = { value = 450000,', "tdp", "450000 W"),
    ("link/nvlink-4.toml", 'bandwidth = { value = 450, unit = "GB/s"', 'bandwidth = { value = 450, unit = "TB/s"',
     "bandwidth", "450 TB/s"),
    ("link/nvlink-4.toml", 'latency = { value = 2, unit = "us"', 'latency = { value = 2, unit = "s"', "latency", "2 s"),
    ("cpu/epyc-9654.toml", 'cores = { value = 96,', 'cores = { value = 96000,', "cores", "96000:"),
    ("defaults.toml", 'gpu_forward = { value = 20, unit = "us"', 'gpu_forward = { value = 20, unit = "s"',
     "overhead.gpu_forward", "20 s"),
])
def test_implausible_hardware_values_are_refused(hwdb_copy, file, old, new, field, shown):
    path = hwdb_copy / file
    _edit(path, old, new)
    with pytest.raises(CatalogError) as err:
        Catalog.open(hwdb_dir=hwdb_copy).hw_entries()
    text = _one_line(err, str(path), f"field '{field}' = {shown}", "outside the plausible range")
    assert re.search(r"range of a \w+ entry, [\d.,]+.* to [\d.,]+", text), text


def test_a_memory_tier_named_twice_is_refused(hwdb_copy):
    # placement picks the FPGA's tier by name ("hbm" / "ddr"): a second "hbm" table would be ignored
    path = hwdb_copy / "fpga" / "v80.toml"
    _edit(path, 'tier = "ddr"', 'tier = "hbm"')
    with pytest.raises(CatalogError) as err:
        Catalog.open(hwdb_dir=hwdb_copy).hw_entries()
    _one_line(err, str(path), "field 'memory[1].tier' = 'hbm'", "each tier once")


def test_the_ranges_are_documented():
    table = (Path(__file__).parents[2] / "docs" / "data-format.md").read_text().split("## Plausible ranges")[1]
    for key, (_, _, text) in PLAUSIBLE.items():
        field = key.split(":")[-1].split(".")[-1].replace("peak", "peak_*")
        assert re.search(rf"`\[?{re.escape(field)}\]?`.*\| {re.escape(text)}", table), (key, text)


def test_the_ranges_accept_the_fastest_devices_of_2026(hwdb_copy):
    # B300/GB300: 288 GB HBM3e at 8 TB/s, 15 PFLOPS dense FP4, 1,400 W (NVIDIA GB300 NVL72 page);
    # an FPGA fabric at 1 GHz; NVLink-5 at 1.8 TB/s (bidirectional, the largest figure printed).
    gpu = hwdb_copy / "gpu" / "b200.toml"
    text = gpu.read_text()
    text = re.sub(r'(capacity = \{ value = )[\d.]+, unit = "\w+"', r'\g<1>288, unit = "GB"', text)
    text = re.sub(r'(bandwidth = \{ value = )[\d.]+, unit = "[\w/]+"', r'\g<1>8, unit = "TB/s"', text)
    text = re.sub(r'(peak_fp4 = \{ value = )[\d.]+', r"\g<1>15000", text)
    text = re.sub(r'(tdp = \{ value = )[\d.]+', r"\g<1>1400", text)
    gpu.write_text(text)
    _edit(hwdb_copy / "fpga" / "v80.toml", 'clock = { value = 300, unit = "MHz"', 'clock = { value = 1, unit = "GHz"')
    _edit(hwdb_copy / "link" / "nvlink-4.toml", 'bandwidth = { value = 450,', 'bandwidth = { value = 1800,')
    opened = Catalog.open(hwdb_dir=hwdb_copy)
    assert opened.device("b200").main_memory.bandwidth_bytes_per_s == 8e12
    assert opened.device("v80").fpga.clock_hz == 1e9 and opened.link("nvlink-4").bandwidth_bytes_per_s == 1.8e12


def test_an_unknown_dsp_type_is_refused(hwdb_copy):
    path = hwdb_copy / "fpga" / "v80.toml"
    _edit(path, 'dsp_type = "DSP58"', 'dsp_type = "XYZ"')
    with pytest.raises(CatalogError) as err:
        Catalog.open(hwdb_dir=hwdb_copy).device("v80")
    _one_line(err, str(path), "field 'dsp_type' = 'XYZ'", "allowed: DSP58, DSP48E2, AI Tensor Block")


def _fpga_named(folder: Path, source: Path, name: str) -> Path:
    (folder / "fpga").mkdir(parents=True, exist_ok=True)
    path = folder / "fpga" / f"{name}.toml"
    path.write_text(source.read_text().replace('name = "v80"', f'name = "{name}"', 1))
    return path


def test_one_name_under_two_kinds_is_refused(hwdb_copy, run):
    fpga = _fpga_named(hwdb_copy, hwdb_copy / "fpga" / "v80.toml", "rtx-4090")
    opened = Catalog.open(hwdb_dir=hwdb_copy)
    for lookup in (lambda: opened.device("rtx-4090"), lambda: opened.hw_entry("rtx-4090", ("gpu",)),
                   opened.hw_entries):
        with pytest.raises(CatalogError) as err:
            lookup()
        _one_line(err, "'rtx-4090'", str(fpga), str(hwdb_copy / "gpu" / "rtx-4090.toml"))
    one_line_error(run("--hwdb-dir", str(hwdb_copy), "hw", "show", "rtx-4090"), str(fpga))


def test_a_user_entry_of_another_kind_does_not_shadow_a_shipped_one(tmp_path, catalog):
    mine = tmp_path / "mine"
    fpga = _fpga_named(mine, catalog.hwdb_dir / "fpga" / "v80.toml", "rtx-4090")
    with pytest.raises(CatalogError) as err:
        Catalog.open(hwdb_dir=mine).device("rtx-4090")
    _one_line(err, str(fpga), str(catalog.hwdb_dir / "gpu" / "rtx-4090.toml"))
    # the same kind earlier on the search path still overrides by name
    (mine / "fpga" / "rtx-4090.toml").unlink()
    (mine / "gpu").mkdir()
    shutil.copy(catalog.hwdb_dir / "gpu" / "rtx-4090.toml", mine / "gpu" / "rtx-4090.toml")
    _edit(mine / "gpu" / "rtx-4090.toml", 'tdp = { value = 450,', 'tdp = { value = 500,')
    assert Catalog.open(hwdb_dir=mine).device("rtx-4090").tdp_w == 500


def test_hw_show_checks_the_host_link(hwdb_copy, run):
    path = hwdb_copy / "fpga" / "v80.toml"
    _edit(path, 'host_link = "pcie-gen4-x16-host-staged"', 'host_link = "pcie-gen4-x16-host-stagd"')
    line = one_line_error(run("--hwdb-dir", str(hwdb_copy), "hw", "show", "v80"), str(path), "field 'host_link'",
                          "names no link entry")
    assert "did you mean 'pcie-gen4-x16-host-staged'" in line
    one_line_error(run("--hwdb-dir", str(hwdb_copy), "hw", "list"), "field 'host_link'")
