"""Shared checks of the CLI tests: what a one-line usage error must look like."""


def one_line_error(result, *needles: str, max_chars: int = 300) -> str:
    """The error line of a refused command: exit 2, one line on stderr, no traceback, every needle in it."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.stderr
    assert len(lines[0]) < max_chars, lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
