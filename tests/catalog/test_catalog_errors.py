"""Bad data files give one line naming the file, the field, the value and what is allowed."""

import json
import re
from pathlib import Path

import pytest

from cli_checks import one_line_error
from dfvg_dse.catalog import Catalog, CatalogError


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("old, new, message", [
    ("hidden_size = 4096", "hidden_size = 0", r"llama-2-7b.toml: field 'config.hidden_size' = 0: must be a positive integer"),
    ("hidden_size = 4096", "hidden_size = 4100", r"field 'config.num_attention_heads' = 32: must divide hidden_size \(4100\)"),
    ('model_type = "llama"', 'model_type = "gpt2"', r"field 'config.model_type' = 'gpt2': allowed families: llama"),
    ("num_hidden_layers = 32\n", "", r"field 'config.num_hidden_layers' missing: required by this model family"),
    ('tag = "datasheet"', 'tag = "rumour"', r"field 'tag' = 'rumour': allowed: datasheet, measured"),
    ('name = "llama-2-7b"', 'name = "llama2"', r"field 'name' = 'llama2': must equal the file name 'llama-2-7b'"),
])
def test_bad_model_file(models_copy, old, new, message):
    path = models_copy / "llama-2-7b.toml"
    _edit(path, old, new)
    with pytest.raises(CatalogError, match=message) as err:
        Catalog.open(models_copy).model("llama-2-7b")
    assert "\n" not in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize("old, new, message", [
    ('bandwidth = { value = 1008,', 'bandwidth = { value = 0,', r"field 'memory\[0\].bandwidth.value' = 0: must be > 0"),
    ('bandwidth = { value = 1008, unit = "GB/s"', 'bandwidth = { value = 1008, unit = "GB"',
     r"field 'memory\[0\].bandwidth.unit' = 'GB': allowed: TB/s, GB/s, MB/s, Gb/s"),
    ('tdp = { value = 450, unit = "W", tag = "paper", source = "DFVG (ASPLOS 2026) Table 2; NVIDIA product page" }',
     'tdp = { value = 450, unit = "W", tag = "paper", source = "" }', r"field 'tdp.source' = '': every number needs"),
    ('tdp = { value = 450, unit = "W", tag = "paper",', 'tdp = { value = 450, unit = "W", tag = "guess",',
     r"field 'tdp.tag' = 'guess': allowed: datasheet"),
    ('decode_power = { value = 236,', 'decode_power = { value = 500,', r"field 'decode_power' = 500: must be <= tdp"),
    ('host_link =', 'host_lnk =', r"field 'host_lnk' = .*unknown field; did you mean 'host_link'"),
    ('kind = "gpu"', 'kind = "fpga"', r"field 'kind' = 'fpga': must be 'gpu'"),
])
def test_bad_hardware_file(hwdb_copy, old, new, message):
    path = hwdb_copy / "gpu" / "rtx-4090.toml"
    _edit(path, old, new)
    with pytest.raises(CatalogError, match=message) as err:
        Catalog.open(hwdb_dir=hwdb_copy).device("rtx-4090")
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_missing_required_quantity(hwdb_copy):
    path = hwdb_copy / "fpga" / "v80.toml"
    path.write_text(re.sub(r"(?m)^branch_lanes = .*\n", "", path.read_text()))
    with pytest.raises(CatalogError, match=r"v80.toml: field 'branch_lanes' missing: required for a fpga entry"):
        Catalog.open(hwdb_dir=hwdb_copy).device("v80")


def test_invalid_toml_names_the_file(hwdb_copy):
    path = hwdb_copy / "link" / "nvlink-3.toml"
    path.write_text("name = \n")
    with pytest.raises(CatalogError, match=r"nvlink-3.toml: not valid TOML"):
        Catalog.open(hwdb_dir=hwdb_copy).link("nvlink-3")


def test_bad_defaults_file(hwdb_copy):
    _edit(hwdb_copy / "defaults.toml", "[efficiency]", "[efficiency]\nsurprise = 1")
    with pytest.raises(CatalogError, match=r"defaults.toml: field 'efficiency.surprise' = 1: unknown key"):
        Catalog.open(hwdb_dir=hwdb_copy).device("v80")


def test_a_power_derived_from_the_defaults_says_so(hwdb_copy):
    # a10.toml states neither power: both are its TDP times defaults.toml's [power] fractions, so a
    # decode fraction that puts the decode power below the idle power names the defaults file too
    _edit(hwdb_copy / "defaults.toml", "gpu_decode_fraction = { value = 0.5,", "gpu_decode_fraction = { value = 5e-10,")
    with pytest.raises(CatalogError, match=r"a10.toml: field 'idle_power' = 22.5: must be <= decode_power .*; "
                                           r"decode_power = tdp x defaults.toml power.gpu_decode_fraction"):
        Catalog.open(hwdb_dir=hwdb_copy).device("a10")


def test_import_rejects_bad_config(tmp_path, catalog):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 3}))
    with pytest.raises(CatalogError, match=r"config.json: field 'config.num_attention_heads' = 3: must divide"):
        catalog.import_model(config, "x", out_dir=tmp_path)
    config.write_text("{not json")
    with pytest.raises(CatalogError, match=r"config.json: not valid JSON"):
        catalog.import_model(config, "x", out_dir=tmp_path)
    assert not list(tmp_path.glob("*.toml"))


@pytest.mark.parametrize("content, message", [
    (b'name = "\xff"\n', r"l4.toml: not valid UTF-8 text"),
    (None, r"field 'tdp.unit' = \['W'\]: allowed: W"),
    ("big", r"field 'tdp.value' = 1000000000000.*: must be a finite number"),
])
def test_wrong_types_and_encodings_are_one_line(hwdb_copy, content, message):
    path = hwdb_copy / "gpu" / "l4.toml"
    text = path.read_text()
    if content is None:
        path.write_text(re.sub(r'tdp = \{ value = (\d+), unit = "W"', r'tdp = { value = \1, unit = ["W"]', text))
    elif content == "big":
        path.write_text(re.sub(r"tdp = \{ value = \d+,", "tdp = { value = 1" + "0" * 400 + ",", text))
    else:
        path.write_bytes(content)
    with pytest.raises(CatalogError, match=message) as err:
        Catalog.open(hwdb_dir=hwdb_copy).device("l4")
    assert "\n" not in str(err.value)


def test_stray_files_are_not_entries(models_copy):
    (models_copy / "Bad Name.toml").write_text("junk")
    (models_copy / ".hidden.toml").write_text("junk")
    (models_copy / "folder.toml").mkdir()
    names = Catalog.open(models_copy).model_names()
    assert "llama-2-7b" in names and not {"Bad Name", ".hidden", "folder"} & set(names)


def test_config_types_are_checked(tmp_path, catalog):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": ["llama"], "hidden_size": 64, "num_attention_heads": 4}))
    with pytest.raises(CatalogError, match=r"field 'config.model_type' = \['llama'\]: allowed families"):
        catalog.import_model(config, "x", out_dir=tmp_path)
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                  "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 10,
                                  "max_position_embeddings": 64, "torch_dtype": ["float16"]}))
    with pytest.raises(CatalogError, match=r"field 'config.torch_dtype' = \['float16'\]: allowed: float32"):
        catalog.import_model(config, "x", out_dir=tmp_path)


def test_import_into_a_file_path_is_one_line(tmp_path, catalog):
    config = tmp_path / "config.json"
    config.write_text((Path(__file__).parent / "config_llama_tiny.json").read_text())
    blocker = tmp_path / "afile"
    blocker.write_text("")
    with pytest.raises(CatalogError, match=r"cannot write"):
        catalog.import_model(config, "x", out_dir=blocker / "sub")


@pytest.mark.parametrize("old, new, command", [
    ("intermediate_size = 11008", "intermediate_size = 11008" + "0" * 300, ("models", "show", "llama-2-7b", "--json")),
    ("intermediate_size = 11008", "intermediate_size = 11008" + "0" * 300,
     ("cost", "--model", "llama-2-7b", "--device", "rtx-4090", "--json")),
    ("hidden_size = 4096", "hidden_size = " + "4096" * 80, ("models", "show", "llama-2-7b")),
])
def test_a_config_count_past_float_range_is_one_line_not_inf(run, models_copy, old, new, command):
    # found by tests/test_data_fuzz.py: `models show` ended in an OverflowError, `cost` printed inf seconds
    path = models_copy / "llama-2-7b.toml"
    _edit(path, old, new)
    field = old.split(" = ")[0]
    one_line_error(run("--models-dir", str(models_copy), *command), str(path), f"field 'config.{field}'",
                   "must be at most 2,147,483,647 (2^31 - 1)")


@pytest.mark.parametrize("kind, name", [("fpga", "v80"), ("gpu", "rtx-4090"), ("cpu", "xeon-silver-4310")])
def test_an_unknown_hardware_field_is_one_short_line(hwdb_copy, kind, name):
    # found by the data fuzzer: the 25 allowed fields of an entry made a 400-character line
    _edit(hwdb_copy / kind / f"{name}.toml", "tdp = ", "tdpp = { value = 1 }\ntdp = ")
    with pytest.raises(CatalogError) as err:
        Catalog.open(hwdb_dir=hwdb_copy).device(name)
    text = str(err.value)
    assert "\n" not in text and len(text) < 300, text
    assert "field 'tdpp'" in text and "did you mean 'tdp'?" in text and "allowed, docs/data-format.md)" in text
    _edit(hwdb_copy / kind / f"{name}.toml", "tdpp = ", "zzz = ")  # nothing close: the first names of the list
    with pytest.raises(CatalogError) as err:
        Catalog.open(hwdb_dir=hwdb_copy).device(name)
    assert len(str(err.value)) < 300 and "field 'zzz'" in str(err.value), str(err.value)
    listed = r"unknown field; allowed: ([a-z_]+, ){5}\.\.\. \(2\d in all, docs/data-format.md\)$"
    assert re.search(listed, str(err.value))


def test_a_long_field_name_is_cut_in_the_one_line(hwdb_copy):
    # found by the data fuzzer: a 300-character key was echoed whole
    _edit(hwdb_copy / "gpu" / "rtx-4090.toml", "tdp = ", f"{'k' * 300} = 1\ntdp = ")
    with pytest.raises(CatalogError) as err:
        Catalog.open(hwdb_dir=hwdb_copy).device("rtx-4090")
    text = str(err.value)
    assert "\n" not in text and len(text) < 400 and "field 'kkkk" in text and "k" * 61 not in text, text


@pytest.mark.parametrize("old, new, needle", [
    ('tier = "ddr"', "", "field 'memory[1].tier' missing: allowed for a fpga entry: hbm, ddr"),
    ('tier = "ddr"', 'tier = "gddr"', "field 'memory[1].tier' = 'gddr': allowed for a fpga entry: hbm, ddr"),
    ('tier = "ddr"', "tier = 5", "field 'memory[1].tier' = 5: allowed for a fpga entry: hbm, ddr"),
])
def test_an_fpga_memory_tier_is_checked_before_its_defaults(run, hwdb_copy, old, new, needle):
    # found by the data fuzzer: a missing or GPU tier on an FPGA ended in KeyError: 'fpga_bandwidth'
    path = hwdb_copy / "fpga" / "v80.toml"
    _edit(path, old, new)
    one_line_error(run("--hwdb-dir", str(hwdb_copy), "hw", "show", "v80"), str(path), needle)
