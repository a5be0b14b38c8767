"""Start-up of the command line (issue 12): wall and CPU time of light commands against `python -c pass`
(target: at most 0.3 s more), and which heavy packages each one loads (none of scipy.stats, pandas,
matplotlib, optuna). Medians over repeats, interleaved so the machine's drift hits every command alike.

Run: python benchmarks/startup.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

COMMANDS = {"python -c pass": ["-c", "pass"], "--version": ["-m", "dfvg_dse", "--version"],
            "--help": ["-m", "dfvg_dse", "--help"], "hw list": ["-m", "dfvg_dse", "hw", "list"],
            "cost": ["-m", "dfvg_dse", "cost", "--model", "llama-2-7b", "--device", "rtx-4090"]}
HEAVY = ("scipy.stats", "scipy.optimize", "pandas", "matplotlib", "optuna")


def run_once(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def heavy_loaded(args: list[str]) -> list[str]:
    """Heavy packages that `python -X importtime ARGS` imports."""
    result = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True, text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    names = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    return [h for h in HEAVY if h in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    repeats = parser.parse_args().repeats
    times = {name: [] for name in COMMANDS}
    for _ in range(repeats):
        for name, args in COMMANDS.items():
            times[name].append(run_once(args))
    base_wall = statistics.median(w for w, _ in times["python -c pass"])
    base_cpu = statistics.median(c for _, c in times["python -c pass"])
    print(f"{'command':16} {'wall ms':>8} {'CPU ms':>7} {'wall over pass':>15} {'CPU over pass':>14}  heavy imports")
    for name, args in COMMANDS.items():
        wall = statistics.median(w for w, _ in times[name])
        cpu = statistics.median(c for _, c in times[name])
        heavy = ", ".join(heavy_loaded(args)) or "none"
        print(f"{name:16} {wall * 1e3:8.0f} {cpu * 1e3:7.0f} {(wall - base_wall) * 1e3:13.0f} ms "
              f"{(cpu - base_cpu) * 1e3:11.0f} ms  {heavy}")


if __name__ == "__main__":
    main()
