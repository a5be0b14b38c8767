"""`dfvg-dse drafters`: which drafter on which device wins for one target (issue 18)."""

from __future__ import annotations

import click

from dfvg_dse.cli._base import cli, emit_json, emit_table, emit_warnings, engine_option
from dfvg_dse.cli.pipeline import _setup
from dfvg_dse.pipeline.scenarios import PLACEMENTS, placements
from dfvg_dse.report import estimate_record
from dfvg_dse.specs import InputError

PLACEMENT_WORDS = {"sps": "on the target's GPU", "amusd": "on a second GPU", "dfvg": "on the FPGA"}


def _drafter_and_acceptance(text: str, default: str | None) -> tuple[str, str | None]:
    """NAME or NAME=SPEC (an acceptance SPEC for this drafter alone)."""
    name, equals, spec = text.partition("=")
    if not name or (equals and not spec):
        raise InputError(f"--drafter {text!r}: give NAME or NAME=ACCEPTANCE (e.g. eagle3-qwen3-8b=0.85)")
    return name, spec or default


@cli.command("drafters")
@engine_option
@click.option("--target", required=True, help="Target model.")
@click.option("--drafter", "drafters", multiple=True, required=True,
              help="A draft model or head, NAME or NAME=ACCEPTANCE (repeat): e.g. qwen3-0.6b, eagle3-qwen3-8b=0.85.")
@click.option("--acceptance", "acceptance_spec", help="Acceptance SPEC of every drafter without its own "
              "[default: pair:TARGET/DRAFTER].")
@click.option("--gpu", default="rtx-4090", show_default=True, help="The verifier GPU.")
@click.option("--fpga", default="v80", show_default=True)
@click.option("--second-gpu", help="The second GPU drafting overlapped [default: another --gpu].")
@click.option("--batch", type=click.IntRange(1, 4096), default=1, show_default=True)
@click.option("--context", type=click.IntRange(0, 10**7), default=512, show_default=True)
@click.option("--rounds", type=click.IntRange(100, 10**6), default=5000, show_default=True,
              help="Monte Carlo rounds for the FPGA's dynamic trees.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def drafters_cmd(ctx, target, drafters, acceptance_spec, gpu, fpga, second_gpu, batch, context, rounds, as_json):
    """Each drafter (draft model or head) on the target's GPU, a second GPU and the FPGA, side by side."""
    cpu = "xeon-silver-4310"  # a Setup names a host CPU; no drafter is placed on it here
    rows = []
    for text in dict.fromkeys(drafters):
        name, spec = _drafter_and_acceptance(text, acceptance_spec)
        setup = _setup(ctx, target, name, gpu, fpga, cpu, second_gpu, None, None, None, spec, batch, context)
        results = {k: estimate_record(e) for k, e in placements(setup, rounds).items()}
        feasible = [k for k in PLACEMENTS if results[k]["feasible"]]
        fastest = max(feasible, key=lambda k: results[k]["tokens_per_s"]) if feasible else None
        frugal = min(feasible, key=lambda k: results[k]["j_per_token"]) if feasible else None
        rows.append({"drafter": name, "kind": setup.draft.head_kind or "lm", "acceptance": setup.acceptance.name,
                     "fastest": fastest, "fewest_joules": frugal, **results})
    if as_json:
        emit_json({"target": target, "gpu": gpu, "fpga": fpga, "drafters": rows})
        return
    emit_warnings(w for r in rows for k in ("ar", *PLACEMENTS) for w in r[k].get("warnings", ()))

    def cell(record: dict) -> str:
        return f"{record['tokens_per_s']:.1f} ({record['j_per_token']:.3f} J)" if record["feasible"] else "infeasible"
    ar = rows[0]["ar"]  # the target alone: the same for every drafter
    baseline = f"AR {ar['tokens_per_s']:.1f} tokens/s, {ar['j_per_token']:.3f} J/token" if ar["feasible"] else \
        f"AR infeasible: {ar['reason']}"
    click.echo(f"{target} on {gpu} ({baseline}); tokens/s (J/token) of each drafter's best chain or tree, "
               f"batch {batch}, context {context}")
    emit_table([[r["drafter"], r["kind"], r["acceptance"], *(cell(r[k]) for k in PLACEMENTS),
                 (PLACEMENT_WORDS[r["fastest"]] + (f" ({r[r['fastest']]['speedup_vs_ar']:.2f}x)"
                                                   if r[r["fastest"]].get("speedup_vs_ar") else ""))
                 if r["fastest"] else "-",
                 PLACEMENT_WORDS[r["fewest_joules"]] if r["fewest_joules"] else "-"] for r in rows],
               ["drafter", "kind", "acceptance", f"on {gpu}", "on a second GPU", f"on {fpga}", "fastest",
                "fewest J/token"])
