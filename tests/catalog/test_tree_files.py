"""Tree files (`--tree FILE`, JSON or TOML; docs/data-format.md): every field is checked when the file
is read, and every error, the tree parser's too, starts with the file."""

import json

import pytest

from cli_checks import one_line_error
from dfvg_dse.catalog import Catalog, CatalogError

ESTIMATE = ("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--verify-device", "rtx-4090",
            "--acceptance", "0.6,0.1")


@pytest.mark.parametrize("document, needle", [
    ({"parents": [-1, 0], "ranks": [0, "a"]}, "field 'ranks[1]' = 'a'"),
    ({"parents": [-1, 0], "ranks": 5}, "field 'ranks' = 5"),
    ({"parents": [-1, 0], "ranks": [0]}, "field 'ranks'"),
    ({"parents": [-1, 0], "ranks": [0, -1]}, "field 'ranks[1]' = -1"),
    ({"parents": [-1, 0, 0], "ranks": [0, 0, 0]}, "field 'ranks[2]' = 0: must be >= 0 and distinct among siblings"),
    ({"parents": 5}, "field 'parents' = 5"),
    ({"parents": [-1, True]}, "field 'parents[1]' = True"),
    ({"parents": [-1, 2, 0]}, "field 'parents[1]' = 2: must be an earlier node"),
    ({"parents": [0, 0]}, "field 'parents'"),
    ({"choices": 5}, "field 'choices' = 5"),
    ({"choices": [["x"]]}, "field 'choices[0][0]' = 'x'"),
    ({"choices": [[0], [0]]}, "field 'choices[1]' = [0]: is listed twice"),
    ({"choices": [[0, 1]]}, "field 'choices[0]' = [0, 1]: needs its parent path [0]"),
    ({"choices": "[[0], [0]]"}, "duplicate path [0]"),  # a path-list string: parsed by the tree module
    ({"parents": [-1] + [0] * 5000}, "5,000 draft tokens"),
    ({"name": 5, "parents": [-1, 0]}, "field 'name' = 5: must be a string"),
    # found by tests/test_data_fuzz.py: a root-only tree crashed estimate, a deep path made a 1,500-character line
    ({"parents": [-1]}, "no draft token below the root"),
    ({"choices": []}, "no draft token below the root"),
    ({"choices": [list(range(300))]}, "needs its parent path [0, 1, 2, 3, 4, 5, 6, 7, ...] listed too"),
])
@pytest.mark.parametrize("command", ["tree", "estimate"])
def test_a_bad_tree_file_is_one_line_that_names_the_file(run, tmp_path, document, needle, command):
    path = tmp_path / "my-tree.json"
    path.write_text(json.dumps(document))
    args = ("tree", "show", "--tree", str(path)) if command == "tree" else (*ESTIMATE, "--tree", str(path))
    line = one_line_error(run(*args), needle)
    assert line.startswith(f"Error: {path}: ")


def test_a_toml_tree_file_is_checked_the_same(tmp_path):
    path = tmp_path / "tree.toml"
    path.write_text('parents = [-1, 0, 0]\nranks = [0, 0, 0]\n')
    with pytest.raises(CatalogError, match=r"tree.toml: field 'ranks\[2\]' = 0"):
        Catalog.open().tree_document(str(path))


@pytest.mark.parametrize("choices, needle", [
    ('"abc"', "tree choices: 'abc' is not a list of paths"),
    ("[[0], [0]]", "field 'choices[1]' = [0]: is listed twice"),
    ("[]", "no draft token below the root"),
])
@pytest.mark.parametrize("command", ["tree", "estimate"])
def test_a_bad_published_tree_names_its_file(run, models_copy, choices, needle, command):
    # found by the data fuzzer: the tree parser's errors named 'published:NAME', not the file (which
    # folder of the search path it came from)
    path = models_copy / "trees" / "eagle-mc-sim-7b-63.toml"
    path.write_text(f'name = "eagle-mc-sim-7b-63"\nsource = "a test"\nchoices = {choices}\n')
    spec = "published:eagle-mc-sim-7b-63"
    args = ("tree", "show", "--tree", spec) if command == "tree" else (*ESTIMATE, "--tree", spec)
    line = one_line_error(run("--models-dir", str(models_copy), *args), needle)
    assert line.startswith(f"Error: {path}: "), line
