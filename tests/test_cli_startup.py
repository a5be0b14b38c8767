"""Start-up (issue 12): the light commands load no heavy package, and the lazily loaded commands show
the same short help as their own docstrings. Timing lives in benchmarks/startup.py, not here."""

import subprocess
import sys

import pytest

from dfvg_dse.cli import cli, load_all_commands

HEAVY = ("scipy.stats", "scipy.optimize", "pandas", "matplotlib", "optuna")
PROBE = """
import sys
from dfvg_dse.cli import cli
try:
    cli({args!r}, standalone_mode=False)
except SystemExit:
    pass
print("heavy:" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["hw", "list"], ["models", "list"],
                                  ["cost", "--model", "llama-2-7b", "--device", "rtx-4090"]], ids=" ".join)
def test_light_commands_load_no_heavy_package(args):
    result = subprocess.run([sys.executable, "-c", PROBE.format(args=args, heavy=HEAVY)], capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "heavy:", result.stdout


def test_a_heavy_command_still_loads_what_it_needs():
    result = subprocess.run([sys.executable, "-c", PROBE.format(args=["search", "--help"], heavy=HEAVY)],
                            capture_output=True, text=True, check=True)
    assert "optuna" in result.stdout.strip().splitlines()[-1]


def test_lazy_short_help_is_the_commands_own_first_line():
    load_all_commands()
    assert set(cli.commands) == set(cli.lazy_commands)
    for name, command in cli.commands.items():
        module, short = cli.lazy_commands[name]
        assert command.callback.__module__ == f"dfvg_dse.cli.{module}", name
        assert short == command.help.strip().splitlines()[0], name
