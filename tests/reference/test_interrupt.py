"""Ctrl-C in a terminal reaches the whole process group — `reference generate` and both stage
processes. At any moment (a stage still starting, or decoding) the command reports one line, exits
130 and leaves no stage process behind; an empty prompt is one line, exit 2."""

import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from dfvg_dse.cli import cli
from dfvg_dse.cli.reference import _prompt_tokens
from dfvg_dse.reference.stages import Job
from dfvg_dse.specs import InputError

GENERATE = [sys.executable, "-m", "dfvg_dse", "reference", "generate", "--prompt", "def f(", "--mode", "spec",
            "--tree", "chain:4"]
WAIT_S = 60  # bound on every wait: start-up of the command, exit after the signal


def _children(pid: int) -> dict[int, tuple[str, str]]:
    """Live (not zombie) children of `pid`: pid -> (start time in ticks, command line)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline") as handle:
                command = handle.read().replace("\0", " ")
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found[int(entry)] = (fields[19], command)
    return found


def _alive(pid: int, started: str) -> bool:
    """The same process (pid and start time) still runs."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == started


def _stages(children: dict) -> dict:
    return {pid: c for pid, c in children.items() if "multiprocessing.spawn" in c[1]}


def _interrupt(max_new_tokens: int, stages: int, after_s: float):
    """Start generate in its own process group, wait until `stages` stage processes exist (and
    `after_s` more), send SIGINT to the group as a terminal does; (exit code, stdout, stderr,
    every child seen)."""
    process = subprocess.Popen(GENERATE + ["--max-new-tokens", str(max_new_tokens)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: dict = {}
    try:
        deadline = time.monotonic() + WAIT_S
        while len(_stages(seen)) < stages:
            assert process.poll() is None and time.monotonic() < deadline, "the stages never started"
            seen.update(_children(process.pid))
            time.sleep(0.005)
        until = time.monotonic() + after_s
        while time.monotonic() < until:
            seen.update(_children(process.pid))
            time.sleep(0.005)
        assert process.poll() is None, "finished before the signal"
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, err, seen


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("max_new_tokens, stages, after_s", [
    (400, 1, 0.0),  # the verify stage is starting (interpreter, imports, weights)
    (400, 2, 0.0),  # the draft stage is starting
    (100000, 2, 1.5),  # decoding
], ids=["verify-stage-starting", "draft-stage-starting", "decoding"])
def test_ctrl_c_to_the_group_is_one_line_and_leaves_no_stage(max_new_tokens, stages, after_s):
    code, out, err, seen = _interrupt(max_new_tokens, stages, after_s)
    assert code == 130, err
    assert "Traceback" not in err
    assert err.splitlines() == ["Error: interrupted (Ctrl-C); nothing was left running"]
    assert out == ""
    # the stages were terminated and waited for before the line was printed
    assert len(_stages(seen)) >= stages
    assert [c[1] for pid, c in _stages(seen).items() if _alive(pid, c[0])] == []
    # multiprocessing's resource tracker is not a stage: it exits by itself once its pipe from
    # the exited parent closes (bounded wait, no timing asserted)
    deadline = time.monotonic() + WAIT_S
    while any(_alive(pid, c[0]) for pid, c in seen.items()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid, c[0]) for pid, c in seen.items())


def test_an_empty_prompt_is_one_line_exit_2():
    result = CliRunner().invoke(cli, ["reference", "generate", "--prompt", ""])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "--prompt" in result.stderr and "Traceback" not in result.stderr


class _NoTokens:
    def encode(self, text: str) -> list[int]:
        return []


def test_a_prompt_that_encodes_to_no_tokens_is_refused():
    with pytest.raises(InputError, match="--prompt"):
        _prompt_tokens("\u200b", None, _NoTokens())
    with pytest.raises(ValueError, match="at least one token"):
        Job((), 8)
