"""`dfvg-dse validate --quick` end to end on this machine: calibration files, the table, the plot,
the JSON summary and an exit code that follows the budget."""

import csv
import json

from click.testing import CliRunner

from dfvg_dse.catalog import Catalog
from dfvg_dse.cli import cli


def test_validate_quick_writes_everything_and_its_exit_code_follows_the_budget(tmp_path):
    result = CliRunner().invoke(cli, ["validate", "--quick", "--out", str(tmp_path), "--json"], catch_exceptions=False)
    document = json.loads(result.stdout)
    assert result.exit_code == (0 if document["passed"] else 1)
    assert [c["config"] for c in document["configs"]][:2] == ["ar", "chain:2 sequential"]
    for key in ("mape_tokens_per_s", "max_error_tokens_per_round", "passed", "calibration", "window", "warnings",
                "suspect", "issues"):
        assert key in document
    assert document["passed"] == (document["within_budget"] and not document["suspect"])
    rows = list(csv.DictReader((tmp_path / "validation.csv").open()))
    assert len(rows) == 5 and all(float(r["measured_tokens_per_s"]) > 0 for r in rows)
    assert (tmp_path / "validation.png").stat().st_size > 1000
    assert "| configuration |" in (tmp_path / "validation.md").read_text()
    # the calibrated cores and pipe are hwdb entries any command can use
    catalog = Catalog.open(hwdb_dir=tmp_path / "calibration" / "hwdb")
    assert catalog.device("local-core-0").kind == "cpu" and catalog.link("local-pipe").latency_s > 0
    # and the calibrated acceptance, with its teacher-forced trace, is a profile file any command reads
    greedy = catalog.acceptance(str(tmp_path / "calibration" / "acceptance" / "reference-greedy.toml"))
    sampled = catalog.acceptance(str(tmp_path / "calibration" / "acceptance" / "reference-sampled.toml"))
    assert greedy.trace.greedy and len(greedy.trace.top_probs) == len(greedy.trace.ranks)
    assert not sampled.trace.greedy and sampled.trace.run_tokens == 128
    # measured tokens per round of a chain lie between 1 and its length + 1
    chain = next(c for c in document["configs"] if c["config"] == "chain:4 sequential")
    assert 1.0 <= chain["measured_tokens_per_round"] <= 5.0
    # greedy static trees replay the held-out prompts' teacher-forced trace: exact up to float
    # near-ties between the stage processes and this one
    for row in document["configs"][1:]:
        assert abs(row["error_tokens_per_round"]) < 0.01, row["config"]
        assert row["error_tokens_per_round_iid"] is not None


def test_bad_option_is_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["validate", "--count", "0", "--out", str(tmp_path)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1


def test_a_backend_that_cannot_run_the_dtype_is_one_line(tmp_path):
    for args, message in ((["--backend", "numpy", "--dtype", "bfloat16"], "--dtype 'bfloat16' with --backend numpy"),
                          (["--backend", "torch", "--torch-device", "tpu"], "--torch-device 'tpu'")):
        result = CliRunner().invoke(cli, ["validate", "--quick", "--target", "builtin:small", *args,
                                          "--out", str(tmp_path / "v")])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert message in result.output and "Traceback" not in result.output
        assert not (tmp_path / "v" / "validation.csv").exists()
