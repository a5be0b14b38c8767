"""Shared checks of the CLI tests: what a one-line usage error must look like, and a CLI call
with a hang guard (the fuzzers')."""

import signal

from click.testing import CliRunner

from dfvg_dse.cli import cli


class Hang(Exception):
    pass


def invoke_bounded(args: list[str], bound_s: int):
    """The command line through CliRunner; a call past bound_s seconds ends in Hang (SIGALRM)."""
    def alarm(signum, frame):
        raise Hang(f"no answer within {bound_s} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(bound_s)
    try:
        return CliRunner().invoke(cli, args, catch_exceptions=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def one_line_error(result, *needles: str, max_chars: int = 300) -> str:
    """The error line of a refused command: exit 2, one line on stderr, no traceback, every needle in it."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.stderr
    assert len(lines[0]) < max_chars, lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
