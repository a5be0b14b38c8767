"""The command line (`dfvg-dse`): one root group; each module registers its noun groups on it.

Modules are imported when one of their commands runs, not at start-up (see _Group). The short
help here is what `dfvg-dse --help` shows before a module is loaded; tests/test_cli.py checks that
it is the command's own first docstring line."""

from dfvg_dse.cli._base import cli

cli.lazy_commands = {
    "acceptance": ("decoding", "Acceptance profiles: shipped pairs, and fits from decoding traces."),
    "calibrate": ("validation",
                  "Fit the cost model to this machine: a core per stage, the pipe between them, and acceptance."),
    "compare": ("pipeline",
                "Every scenario side by side (ar, sps, specinfer, duodecoding, dovetail, amusd, dfvg) and DFVG's ablation."),
    "cost": ("hardware", "Time of one forward pass on one device (or a group of GPUs): bound, FLOPs, bytes and memory fit"),
    "drafters": ("drafters",
                 "Each drafter (draft model or head) on the target's GPU, a second GPU and the FPGA, side by side."),
    "engines": ("engines", "Serving-engine profiles: kernel efficiencies and overheads fitted to published measurements."),
    "estimate": ("pipeline",
                 "Tokens/s, J/token and stage breakdown of one design (tree or dynamic rule, placement, schedule)."),
    "export": ("deploy", "A deployment config for a recommended design: ours (json) or a serving engine's."),
    "hw": ("hardware", "Hardware database: FPGAs, GPUs, CPUs and links."),
    "models": ("hardware", "Model database: shapes of draft and target LLMs."),
    "pareto": ("search", "Redraw a finished run's Pareto plots (pareto.png, pareto.svg) from its trials.csv."),
    "reference": ("reference", "The reference decoder: small models (numpy, or torch in bfloat16) that really draft and verify."),
    "search": ("search",
               "Multi-objective search (tokens/s up, J/token or $/Mtoken down) over trees, schedules, batch and hardware."),
    "serve-sim": ("serving", "Serve a design under load: Poisson arrivals, continuous batching, prefill; TTFT, TPOT, goodput."),
    "sensitivity": ("pipeline",
                    "Speedup of dfvg, amusd, specinfer and sps as one factor varies, and where the FPGA split stops paying."),
    "sweep": ("search", "Evaluate the whole space on its grid (vectorised) and write the exact Pareto front."),
    "tree": ("decoding", "Token trees: expected tokens, optimal trees, drawings, dynamic drafting."),
    "validate": ("validation",
                 "Calibrate, then run the reference decoder on held-out prompts and compare with the model's"),
}


def load_all_commands() -> None:
    """Import every command module (tests, documentation tools)."""
    for name in cli.lazy_commands:
        cli.get_command(None, name)


__all__ = ["cli", "load_all_commands"]
