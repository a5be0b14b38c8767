"""Study files (docs/search.md, "Study files"): every table and key is checked when the file is read,
and a mistake is one line naming the file and the study's own key, never a traceback or a silent
truncation."""

import json

import pytest

from cli_checks import one_line_error
from dfvg_dse.catalog import Catalog, CatalogError
from dfvg_dse.pipeline.grid import FAMILIES, SCHEDULE_CHOICES

CHOICES = {"families": FAMILIES, "schedules": SCHEDULE_CHOICES}
TABLES = {"models": 'target = "qwen3-8b"\ndraft = "qwen3-0.6b"',
          "hardware": 'verify_devices = ["rtx-4090"]\ndraft_devices = ["v80", "rtx-4090"]',
          "space": 'families = ["chain"]\ndepths = [2, 4]\nbatches = [1]'}


def _study(tmp_path, **lines):
    """A small valid study with one line per table replaced (table=None drops it) or added."""
    text = ""
    for table, body in TABLES.items():
        extra = lines.get(table, "")
        keys = {line.split("=")[0].strip() for line in extra.splitlines() if "=" in line}
        kept = [line for line in body.splitlines() if line.split("=")[0].strip() not in keys]
        text += f"[{table}]\n" + "\n".join(kept + ([extra] if extra else [])) + "\n"
    path = tmp_path / "study.toml"
    path.write_text(lines.get("top", "") + text)
    return path


@pytest.mark.parametrize("table, line, needle", [
    ("models", 'targett = "qwen3-8b"', "[models] targett = 'qwen3-8b': unknown key; allowed: target, draft"),
    ("models", "target = 5", "[models] target = 5: must be a string"),
    ("models", "acceptance = 0.8", "[models] acceptance = 0.8: must be a string"),
    ("models", 'target_dtype = "fp99"', "[models] target_dtype = 'fp99': allowed: float32"),
    ("hardware", 'verify_devices = "rtx-4090"', "[hardware] verify_devices = 'rtx-4090': must be a list"),
    ("hardware", "draft_devices = []", "[hardware] draft_devices = []: must be a non-empty list"),
    ("hardware", 'draft_devices = ["v80", "v80"]', "[hardware] draft_devices[1] = 'v80': is listed twice"),
    ("hardware", 'links = "x"', "[hardware] links = 'x': must be a table"),
    ("hardware", "links = { v80 = 5 }", "[hardware] links.v80 = 5: must be a link name"),
    ("hardware", 'verify_device = ["rtx-4090"]', "[hardware] verify_device = ['rtx-4090']: unknown key"),
    ("space", "widths = [1.5]", "[space] widths[0] = 1.5: must be an integer"),
    ("space", "widths = [2.0]", "[space] widths[0] = 2.0: must be an integer"),
    ("space", 'widths = ["x"]', "[space] widths[0] = 'x': must be an integer"),
    ("space", "depths = [true]", "[space] depths[0] = True: must be an integer"),
    ("space", "depths = [2, 2]", "[space] depths[1] = 2: is listed twice"),
    ("space", "depths = 4", "[space] depths = 4: must be a non-empty list"),
    ("space", "batches = [0]", "[space] batches[0] = 0: must be an integer in 1..4,096"),
    ("space", 'thresholds = ["0.5"]', "[space] thresholds[0] = '0.5': must be a number"),
    ("space", "fpga_clocks_mhz = [1e300]", "[space] fpga_clocks_mhz[0] = 1e+300: must be a number in 1..1000"),
    ("space", "fpga_clocks_mhz = [nan]", "[space] fpga_clocks_mhz[0] = nan: must be a number"),
    ("space", 'families = ["chian"]', "[space] families[0] = 'chian': allowed: chain, seq"),
    ("space", "schedules = [1]", "[space] schedules[0] = 1: allowed: sequential"),
    ("space", "context = 5.0", "[space] context = 5.0: must be an integer in 0..10,000,000"),
    ("space", "targett = [1]", "[space] targett = [1]: unknown key; allowed: context, families"),
    ("top", 'targett = "x"\n', "targett = 'x': unknown key outside a table"),
])
def test_a_bad_key_or_value_is_one_line_naming_the_file_and_key(tmp_path, table, line, needle):
    path = _study(tmp_path, **{table: line})
    with pytest.raises(CatalogError) as caught:
        Catalog.read_study(path, CHOICES)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and needle in message and "\n" not in message


def test_a_table_name_with_a_value_that_is_no_table_is_refused(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text('models = "qwen3-8b"\n')
    with pytest.raises(CatalogError, match="models = 'qwen3-8b': must be a table"):
        Catalog.read_study(path)


def test_a_good_study_reads_back_typed_and_without_defaults(tmp_path):
    path = _study(tmp_path, space="thresholds = [0, 0.5]\ncontext = 128",
                  hardware='links = { v80 = "pcie-gen5-x8-p2p" }')
    doc = Catalog.read_study(path, CHOICES)
    assert doc["space"] == {"families": ["chain"], "depths": [2, 4], "batches": [1], "thresholds": [0.0, 0.5],
                            "context": 128}
    assert all(type(x) is float for x in doc["space"]["thresholds"])
    assert doc["hardware"]["links"] == {"v80": "pcie-gen5-x8-p2p"}
    assert json.loads(json.dumps(doc)) == doc  # kept as is in the run's manifest, compared on --resume


@pytest.mark.parametrize("line, needle", [
    ('targett = "qwen3-8b"', "[models] targett"),
    ("widths = [1.5]", "[space] widths[0] = 1.5: must be an integer"),
    ('verify_devices = "rtx-4090"', "[hardware] verify_devices = 'rtx-4090': must be a list of devices"),
    ("depths = [true]", "[space] depths[0] = True"),
    ("draft_devices = []", "[hardware] draft_devices = []"),
])
@pytest.mark.parametrize("command", ["search", "sweep"])
def test_search_and_sweep_refuse_a_bad_study_in_one_line(run, tmp_path, command, line, needle):
    table = "models" if "targett" in line else "hardware" if "devices" in line else "space"
    path = _study(tmp_path, **{table: line})
    result = run(command, "--study", str(path), "--results-dir", str(tmp_path / "runs"), "--run-id", "r")
    one_line_error(result, str(path), needle)
    assert not (tmp_path / "runs" / "r").exists()


@pytest.mark.parametrize("table, line, needle", [
    ("models", 'target = "qwen3-9b"', "[models] target: unknown model 'qwen3-9b'"),
    ("hardware", 'draft_devices = ["v80", "rtx-4909"]', "[hardware] draft_devices[1]: unknown device 'rtx-4909'"),
    ("hardware", 'links = { v80 = "pcie-gen9" }', "[hardware] links.v80: unknown link 'pcie-gen9'"),
    ("hardware", 'verify_devices = ["v80"]', "[hardware] verify_devices: the target verifies on a GPU or CPU"),
    ("hardware", 'links = { v8o = "pcie-gen5-x8-p2p" }', "[hardware] links.v8o: not one of the draft devices"),
    ("models", 'acceptance = "pair:nope"', "[models] acceptance: unknown acceptance profile 'nope'"),
])
def test_unknown_names_in_a_study_name_the_study_key(run, tmp_path, table, line, needle):
    path = _study(tmp_path, **{table: line})
    one_line_error(run("sweep", "--study", str(path), "--results-dir", str(tmp_path)), str(path), needle,
                   max_chars=600)
    if table == "hardware" and "draft_devices" in line:  # a flag wins over the file and is not blamed on it
        flagged = one_line_error(run("sweep", "--study", str(path), "--draft-device", "rtx-4909",
                                     "--results-dir", str(tmp_path)), "unknown device 'rtx-4909'", max_chars=600)
        assert "[hardware]" not in flagged


@pytest.mark.parametrize("command", ["search", "sweep"])
def test_a_study_pair_without_a_profile_names_the_study(run, tmp_path, command):
    # found by tests/test_data_fuzz.py: the error said "pass --acceptance" and named no file
    path = _study(tmp_path, models='draft = "opt-125m"')
    line = one_line_error(run(command, "--study", str(path), "--results-dir", str(tmp_path / "runs")),
                          f"{path}: [models] target and draft: no acceptance profile for qwen3-8b/opt-125m",
                          "give acceptance = SPEC under [models]", max_chars=400)
    assert "--acceptance" in line
    flagged = one_line_error(run(command, "--study", str(path), "--target", "opt-13b", "--draft", "llama-68m",
                                 "--results-dir", str(tmp_path / "runs")), max_chars=400)
    assert str(path) not in flagged and "opt-13b/llama-68m" in flagged  # the flags chose the pair, not the file


@pytest.mark.parametrize("table, line", [
    ("space", f"{'y' * 300} = 1"), ("top", f"{'w' * 300} = 1\n"), ("top", f"[{'z' * 300}]\na = 1\n"),
    ("hardware", f'links = {{ {"x" * 300} = "nvlink-4" }}'),
])
def test_a_long_study_key_is_cut_in_the_one_line(run, tmp_path, table, line):
    # found by tests/test_data_fuzz.py: a 300-character key was echoed whole (a 438-character line)
    path = _study(tmp_path, **{table: line})
    text = one_line_error(run("search", "--study", str(path), "--results-dir", str(tmp_path / "runs")), str(path),
                          max_chars=400)
    assert "..." in text and not any(c * 61 in text for c in "xyzw"), text


@pytest.mark.parametrize("command", ["search", "sweep"])
def test_a_study_past_the_sequoia_limit_names_the_study_before_any_output(run, tmp_path, command):
    # review of issue 13: the DP's refusal came mid-run, named no file, and left a run folder behind
    path = _study(tmp_path, space='families = ["optimal"]\nbudgets = [4096]\ndepths = [1024]')
    line = one_line_error(run(command, "--study", str(path), "--results-dir", str(tmp_path / "runs"),
                              "--run-id", "r"), f"{path}: [space] budgets and depths: tree: Sequoia DP",
                          "budget <= 629 at depth 1024", max_chars=400)
    assert "past the" in line and not (tmp_path / "runs").exists()
    from dfvg_dse.tree.optimal import MAX_DP_STEPS, check_sequoia, dp_steps

    profile = Catalog.open().pair_profile("qwen3-8b", "qwen3-0.6b")  # the budget it names is the largest allowed
    assert check_sequoia(profile, 629, 1024) == 16 and dp_steps(630, 1024, 16) > MAX_DP_STEPS


def test_a_profile_file_named_in_a_study_is_found_next_to_the_study(run, tmp_path, catalog):
    # review of issue 13: a relative acceptance path was read from the working folder, not the study's
    folder = tmp_path / "studies"
    folder.mkdir()
    profile = catalog.profile("qwen3-8b/qwen3-0.6b")
    (folder / "mine.toml").write_text((catalog.models_dir / "pairs" / "qwen3-8b__qwen3-0.6b.toml").read_text()
                                      .replace("0.8,", "0.7,", 1))
    path = _study(tmp_path, models='acceptance = "mine.toml"')
    path = path.rename(folder / "study.toml")
    result = run("sweep", "--study", str(path), "--results-dir", str(tmp_path / "runs"), "--run-id", "r", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    assert manifest["inputs"]["acceptance"] == str(folder / "mine.toml")
    assert catalog.acceptance(str(folder / "mine.toml")).rank_probs[0] == 0.7 != profile.rank_probs[0]
    missing = _study(tmp_path, models='acceptance = "profiles/none.toml"')
    one_line_error(run("sweep", "--study", str(missing), "--results-dir", str(tmp_path / "runs")), str(missing),
                   "[models] acceptance", "no such file", f"{tmp_path.name[-4:]}/profiles/none.toml'", max_chars=600)
