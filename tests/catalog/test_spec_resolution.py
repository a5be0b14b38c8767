"""`--x SPEC or FILE` resolution (catalog.lookup): inline specs of any length, missing files, odd literals."""

import pytest

from dfvg_dse.catalog import CatalogError
from dfvg_dse.catalog.lookup import spec_file
from dfvg_dse.specs import InputError

LONG_VECTOR = ",".join(["0.512345678"] + ["0.0123456789"] * 31)  # 414 characters: past NAME_MAX (255)
LONG_PARENTS = "parents:" + ",".join(["-1"] + [str(i // 2) for i in range(127)])


def short_line(err: Exception) -> str:
    text = str(err)
    assert "\n" not in text and len(text) < 200
    return text


def test_specs_too_long_for_a_file_name_are_inline(catalog):
    assert len(LONG_VECTOR) > 255 and len(LONG_PARENTS) > 255
    assert len(catalog.acceptance(LONG_VECTOR).rank_probs) == 32
    assert catalog.tree_document(LONG_PARENTS) is None  # the tree parser takes it from here
    assert spec_file("x" * 5000, "tree") is None


@pytest.mark.parametrize("spec", ["nosuch/tree.json", "nosuch.toml", "trees.jsonl", "../x", "a" * 300 + ".json"])
def test_path_like_specs_that_name_no_file_say_so(catalog, spec, tmp_path, monkeypatch):
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")  # relative names resolve where nothing exists
    with pytest.raises(InputError) as caught:
        catalog.tree_document(spec)
    assert short_line(caught.value).startswith("tree: no such file: '")
    with pytest.raises(InputError, match="acceptance: no such file: '"):
        catalog.acceptance(spec)


def test_a_folder_is_not_a_spec(catalog, tmp_path):
    with pytest.raises(InputError, match="is a folder, not a file"):
        catalog.tree_document(str(tmp_path))
    with pytest.raises(InputError, match="acceptance: .* is a folder, not a file"):
        catalog.acceptance(str(tmp_path))


def test_files_still_win(catalog, tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"parents": [-1, 0]}')
    assert catalog.tree_document(str(path)) == {"parents": [-1, 0]}


@pytest.mark.parametrize("spec, message", [
    ("a" * 300, "acceptance 'aaaa"),
    ("1e999", "acceptance '1e999': value 1 = inf: must be a probability in [0, 1]"),
    ("0.5,nan", "acceptance '0.5,nan': value 2 = nan"),
    ("0.7,0.7", "acceptance '0.7,0.7': the sum = 1.4"),
])
def test_odd_acceptance_literals_are_short_lines_naming_the_option(catalog, spec, message):
    with pytest.raises(InputError) as caught:
        catalog.acceptance(spec)
    assert message in short_line(caught.value)


@pytest.mark.parametrize("spec", ["published:" + "x" * 300, "pair:" + "y" * 300])
def test_long_names_are_cut_in_messages(catalog, spec):
    with pytest.raises(CatalogError) as caught:
        catalog.tree_document(spec) if spec.startswith("published:") else catalog.acceptance(spec)
    assert "x" * 58 not in str(caught.value) and "y" * 58 not in str(caught.value) and "..." in str(caught.value)
    if spec.startswith("published:"):
        short_line(caught.value)


@pytest.mark.parametrize("read, what", [("read_study", "study"), ("read_trace", "trace"),
                                        ("read_reference_prompts", "prompts")])
def test_missing_files_of_file_options_are_short_lines(catalog, read, what):
    with pytest.raises(InputError) as caught:
        getattr(catalog, read)("a" * 300 + ".toml")
    assert short_line(caught.value).startswith(f"{what}: no such file: '...")
    assert catalog.is_file("a" * 300) is False


def test_a_spec_that_is_not_a_string_is_one_line(catalog):
    with pytest.raises(InputError, match="acceptance 0.8: a SPEC is a string"):
        catalog.acceptance(0.8)  # a study file's `acceptance = 0.8`
