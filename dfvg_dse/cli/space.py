"""The search space a command explores: the shipped defaults, a study file and the flags (flags win),
and the summary of it a run's manifest keeps (docs/search.md, "Study files")."""

from __future__ import annotations

import math

from dfvg_dse.catalog import CatalogError
from dfvg_dse.cli._base import catalog_of
from dfvg_dse.pipeline.grid import FAMILIES, SCHEDULE_CHOICES, SearchSpace, unpriced_devices
from dfvg_dse.specs import InputError
from dfvg_dse.specs.hardware import shorten
from dfvg_dse.specs.objectives import DEFAULT_COST, SPEED_FLAG, cost_objective, parse_objectives
from dfvg_dse.serving import check_request_count
from dfvg_dse.specs.serving import LoadSpec, ServingSetup

DEFAULTS = {"target": "qwen3-8b", "draft": "qwen3-0.6b", "target_dtype": "float16", "draft_dtype": "bfloat16",
            "verify_devices": ["rtx-4090"], "draft_devices": ["v80", "u280", "rtx-4090", "xeon-silver-4310"]}


def search_request(ctx, study: str | None, target, draft, acceptance, verify: tuple, drafts: tuple,
                   method: str | None = None, objectives: str | None = None, serving: dict | None = None) -> dict:
    """What the user asked for: the study file, checked and typed (Catalog.read_study), and the flags
    (kept in the manifest for --resume); `objectives` as --objectives spells them; `serving` the load
    (serving_request), when the search runs under one."""
    choices = {"families": FAMILIES, "schedules": SCHEDULE_CHOICES}
    cost = parse_objectives(objectives) if objectives else DEFAULT_COST
    return {"study": catalog_of(ctx).read_study(study, choices) if study else {}, "study_path": study,
            "target": target, "draft": draft, "acceptance": acceptance, "verify": list(verify), "drafts": list(drafts),
            "engine": ctx.obj.get("engine"), "cost": cost, **({"method": method} if method else {}),
            **({"serving": serving} if serving else {})}


SERVING_DEFAULTS = {"workload": "sharegpt-vllm", "duration_s": 60.0}


def serving_request(rate, workload, slo_ttft_ms, slo_tpot_ms, duration_s) -> dict | None:
    """The load flags of a search as the manifest keeps them; None without --rate (the others need it)."""
    if rate is None:
        given = [name for name, value in (("--workload", workload), ("--slo-ttft", slo_ttft_ms),
                                          ("--slo-tpot", slo_tpot_ms), ("--duration", duration_s)) if value is not None]
        if given:
            raise InputError(f"{given[0]}: only with --rate (a search under load)")
        return None
    return {"rate_per_s": rate, "workload": workload or SERVING_DEFAULTS["workload"], "slo_ttft_ms": slo_ttft_ms,
            "slo_tpot_ms": slo_tpot_ms, "duration_s": duration_s or SERVING_DEFAULTS["duration_s"]}


def serving_setup(catalog, serving: dict | None) -> ServingSetup | None:
    """The ServingSetup of a request's load (a saved manifest's too)."""
    if not serving:
        return None
    ms = lambda value: math.inf if value is None else value * 1e-3  # noqa: E731
    load = LoadSpec(serving["rate_per_s"], serving["duration_s"], ms(serving.get("slo_ttft_ms")),
                    ms(serving.get("slo_tpot_ms")))
    workload = catalog.workload(serving["workload"])
    if workload.arrivals_s:
        raise InputError(f"--workload {serving['workload']}: a trace with arrival_s sets its own arrivals; a search "
                         "under load draws them at --rate (drop the arrival_s column)")
    check_request_count(load)
    return ServingSetup(workload, load)


def search_space(ctx, request: dict, catalog=None) -> tuple[SearchSpace, dict]:
    """A SearchSpace from the shipped defaults, the checked study document and the flags (flags win);
    GPUs priced by `catalog`'s engine (default: the command's)."""
    catalog = catalog or catalog_of(ctx)
    doc, study = request["study"], request["study_path"] or "study"
    target, draft, acceptance = request["target"], request["draft"], request["acceptance"]
    verify, drafts = request["verify"], request["drafts"]
    models, hardware, space = doc.get("models", {}), doc.get("hardware", {}), doc.get("space", {})
    chosen = {"target": target or models.get("target", DEFAULTS["target"]),
              "draft": draft or models.get("draft", DEFAULTS["draft"]),
              "target_dtype": models.get("target_dtype", DEFAULTS["target_dtype"]),
              "draft_dtype": models.get("draft_dtype", DEFAULTS["draft_dtype"]),
              "verify_devices": list(verify) or hardware.get("verify_devices", DEFAULTS["verify_devices"]),
              "draft_devices": list(drafts) or hardware.get("draft_devices", DEFAULTS["draft_devices"])}
    chosen["acceptance"] = acceptance or models.get("acceptance", f"pair:{chosen['target']}/{chosen['draft']}")

    def from_study(where: str | None, lookup, *args, **kwargs):
        """`lookup(*args, **kwargs)`; when the value came from the study file, its error names the file and key."""
        try:
            return lookup(*args, **kwargs)
        except (CatalogError, InputError) as err:
            if where is None:
                raise
            raise CatalogError(f"{study}: {where}: {err}") from None

    def key(table: str, name: str, flag, index: int | None = None) -> str | None:
        """The study key a chosen value came from, or None (a flag or a default)."""
        if flag or name not in doc.get(table, {}):
            return None
        return f"[{table}] {name}" + (f"[{index}]" if index is not None else "")

    target_model = from_study(key("models", "target", target), catalog.model, chosen["target"]) \
        .served_in(models.get("target_dtype"), DEFAULTS["target_dtype"])
    chosen["target_dtype"] = target_model.weight_dtype
    draft_model = from_study(key("models", "draft", draft), catalog.draft, chosen["draft"], target_model.name)
    if draft_model.head_kind and "draft_dtype" not in models:  # a head runs in its target's dtypes
        chosen["draft_dtype"] = draft_model.weight_dtype
    else:
        draft_model = draft_model.with_dtypes(chosen["draft_dtype"], chosen["draft_dtype"])
    verifiers = tuple(from_study(key("hardware", "verify_devices", verify, i), catalog.device, n)
                      for i, n in enumerate(chosen["verify_devices"]))
    drafters = tuple(from_study(key("hardware", "draft_devices", drafts, i), catalog.device, n)
                     for i, n in enumerate(chosen["draft_devices"]))
    if any(v.kind == "fpga" for v in verifiers):
        where = key("hardware", "verify_devices", verify)
        raise InputError(f"{study + ': ' + where if where else '--verify-device'}: the target verifies on a GPU "
                         "or CPU, not an FPGA")
    links = hardware.get("links", {})
    unused = [name for name in links if name not in chosen["draft_devices"]]
    if unused and not drafts:  # a typo would leave the device on its host link without a word
        raise InputError(f"{study}: [hardware] links.{shorten(unused[0])}: not one of the draft devices "
                         f"({', '.join(chosen['draft_devices'])})")
    link_specs = []
    for d in drafters:
        name = links.get(d.name) or d.host_link
        if name is None and d.name not in {v.name for v in verifiers}:
            raise InputError(f"no link for draft device '{d.name}': name one under [hardware] links")
        if name is not None:
            where = f"[hardware] links.{d.name}" if d.name in links else None
            link_specs.append((d.name, from_study(where, catalog.link, name)))
    defaults = catalog.defaults()
    given = acceptance or models.get("acceptance")
    # without an acceptance, the pair's profile: when the study chose the pair, its error names the study
    chose = [name for name, flag in (("target", target), ("draft", draft)) if key("models", name, flag)]
    pair_key = f"[models] {' and '.join(chose)}" if chose else None
    profile = from_study(key("models", "acceptance", acceptance), catalog.acceptance, given) if given \
        else from_study(pair_key, catalog.pair_profile, chosen["target"], chosen["draft"],
                        "give acceptance = SPEC under [models] (0.8, a rank vector, pair:NAME or a profile file) "
                        "or pass --acceptance" if pair_key else "")
    kwargs = {name: value if name == "context" else tuple(value) for name, value in space.items()}
    sized = [name for name in ("budgets", "depths") if name in space]  # Sequoia's DP is refused past its size
    result = from_study(f"[space] {' and '.join(sized)}" if sized else None, SearchSpace, target_model, draft_model,
                        profile, verifiers, drafters, tuple(link_specs), sync_s=defaults.sync_per_round_s,
                        record_bytes=defaults.token_record_bytes, cost=request.get("cost", DEFAULT_COST),
                        serving=serving_setup(catalog, request.get("serving")), **kwargs)
    return result, chosen


def space_summary(space: SearchSpace) -> dict:
    return {"families": space.families, "widths": space.widths, "depths": space.depths, "budgets": space.budgets,
            "thresholds": space.thresholds, "window_ratios": space.window_ratios,
            "temperatures": space.temperatures, "schedules": space.schedules,
            "batches": space.batches, "fpga_pe_fractions": space.fpga_pe_fractions,
            "fpga_clocks_mhz": space.fpga_clocks_mhz, "context": space.context,
            "verify_devices": [d.name for d in space.verify_devices],
            "draft_devices": [d.name for d in space.draft_devices], "links": {k: v.name for k, v in space.links},
            "cost": space.cost, **({"serving": {"workload": space.serving.workload.name,
                                                  "rate_per_s": space.serving.load.rate_per_s,
                                                  "slo_ttft_s": _finite(space.serving.load.slo_ttft_s),
                                                  "slo_tpot_s": _finite(space.serving.load.slo_tpot_s),
                                                  "duration_s": space.serving.load.duration_s,
                                                  "min_slo_attainment": space.serving.min_attainment}}
                                    if space.serving is not None else {})}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def unpriced_warnings(space: SearchSpace) -> list[str]:
    """For a cost that needs prices: a warning naming the devices without one (their designs are
    infeasible); an error when no design of the space is priced."""
    if not cost_objective(space.cost).needs_price:
        return []
    names, priced = unpriced_devices(space)
    flag = f"--objectives {SPEED_FLAG},{space.cost}"
    remedy = "give price_per_hour in a hwdb overlay (docs/data-format.md)"
    if not priced:
        other = "draft on a priced device (the verifier itself: --draft-device NAME)" \
            if any(v.price_usd_per_s is not None for v in space.verify_devices) else \
            "verify on a rented GPU ('dfvg-dse hw list' shows the prices per hour)"
        raise InputError(f"{flag}: no design of the space is priced: no price per hour for {', '.join(names)}; "
                         f"{remedy}, or {other}")
    return [f"{flag}: no price per hour for {', '.join(names)}: the designs on them are infeasible; {remedy} to "
            "price them"] if names else []
