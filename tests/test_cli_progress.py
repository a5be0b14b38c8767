"""Progress of long commands (issue 12, item 12): one line rewritten on a terminal's stderr, nothing
off a terminal or with --json, and one call per step from the commands that show it."""

import io
import json

from click.testing import CliRunner

from dfvg_dse.cli import cli
from dfvg_dse.cli._base import ProgressLine, progress_line

ESTIMATE = ["estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "v80", "--verify-device",
            "rtx-4090", "--tree", "chain:4", "--simulate", "--rounds", "2000"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_is_rewritten_in_place_and_cleared_at_the_end():
    screen = Terminal()
    with ProgressLine("validate", stream=screen) as progress:
        progress(5, 17, "chain:4 overlap")
        assert ProgressLine.shown is progress
        progress(6, 17, "ar")
    text = screen.getvalue()
    assert text.startswith("\rvalidate: 5/17 chain:4 overlap [0 s]")
    assert "\rvalidate: 6/17 ar [0 s]" in text and "\n" not in text
    assert text.endswith("\r") and text.rsplit("\r", 2)[1].strip() == ""  # blanked, cursor back at the start
    assert ProgressLine.shown is None


def test_nothing_is_written_off_a_terminal_or_with_json(monkeypatch):
    pipe = io.StringIO()
    with ProgressLine("validate", stream=pipe) as progress:
        progress(1, 2, "ar")
    assert pipe.getvalue() == ""
    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    with progress_line("validate", as_json=True) as progress:
        progress(1, 2, "ar")
    assert screen.getvalue() == ""
    with progress_line("validate", as_json=False) as progress:
        progress(1, 2, "ar")
    assert "validate: 1/2 ar" in screen.getvalue()


def test_an_error_clears_a_line_still_shown(monkeypatch):
    screen = Terminal()
    ProgressLine("compare", stream=screen)(1, 4, "vicuna-7b / vicuna-160m")
    result = CliRunner().invoke(cli, ["cost", "--model", "no-such-model", "--device", "v80"])
    assert result.exit_code == 2 and ProgressLine.shown is None
    assert screen.getvalue().endswith("\r")


def test_under_clirunner_stderr_is_no_terminal_and_json_stays_one_document():
    result = CliRunner().invoke(cli, ESTIMATE + ["--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["simulate"]["tokens_per_s"] > 0 and "\r" not in result.stderr
    text = CliRunner().invoke(cli, ESTIMATE)
    assert text.exit_code == 0 and "\r" not in text.stderr + text.stdout and "estimate: " not in text.stderr


def _recording(monkeypatch, module):
    """Every progress call of `module`'s commands, as if stderr were a terminal."""
    calls = []

    class Recording(ProgressLine):
        def __call__(self, done, total, step=""):
            if self.enabled:  # what a terminal would show
                calls.append((self.label, done, total, step))
            super().__call__(done, total, step)

    monkeypatch.setattr(f"dfvg_dse.cli.{module}.progress_line",
                        lambda label, as_json: Recording(label, not as_json, Terminal()))
    return calls


def test_estimate_reports_its_two_phases(monkeypatch):
    calls = _recording(monkeypatch, "pipeline")
    assert CliRunner().invoke(cli, ESTIMATE).exit_code == 0
    assert calls == [("estimate", 1, 2, "the closed form"), ("estimate", 2, 2, "simulating 2,000 rounds")]


def test_compare_preset_reports_each_pair(monkeypatch):
    calls = _recording(monkeypatch, "pipeline")
    result = CliRunner().invoke(cli, ["compare", "--preset", "dfvg-paper", "--rounds", "200", "--json"])
    assert result.exit_code == 0 and calls == []  # --json: no progress at all
    json.loads(result.stdout)
    assert CliRunner().invoke(cli, ["compare", "--preset", "dfvg-paper", "--rounds", "200"]).exit_code == 0
    assert [(c[1], c[2]) for c in calls] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert calls[-1][3] == "qwen3-8b / qwen3-0.6b"


def test_reference_bench_reports_every_run(monkeypatch, tmp_path):
    calls = _recording(monkeypatch, "reference")
    result = CliRunner().invoke(cli, ["reference", "bench", "--count", "2", "--repeats", "1", "--trees", "chain:2",
                                      "--schedules", "sequential,overlap", "--max-new-tokens", "8",
                                      "-o", str(tmp_path / "bench.csv")])
    assert result.exit_code == 0, result.output
    total = 1 + 1 * 2 * 3  # warm-up, then repeats x prompts x (ar + chain:2 under both schedules)
    assert [(c[1], c[2]) for c in calls] == [(i, total) for i in range(1, total + 1)]
    assert calls[0][3] == "warm-up" and calls[-1][3] == "repeat 1/1 prompt 2/2 chain:2 overlap"
