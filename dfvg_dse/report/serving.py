"""Serving runs as records and tables (docs/serving.md): one record per design and rate, and where
speculation stops paying along a rate sweep."""

from __future__ import annotations

from dfvg_dse.serving import ServingMetrics, first_rate_where


def serving_record(design: str, rate_per_s: float, metrics: ServingMetrics) -> dict:
    """One design at one offered rate: every metric, seconds and tokens as named."""
    return {"design": design, "offered_rate_per_s": rate_per_s, **metrics._asdict()}


SLO_CAPACITY_ATTAINMENT = 0.9  # a rate is sustained when 90% of its requests meet both SLOs (DistServe)
TPOT_MARGIN = 0.02  # a design pays while its median TPOT is over 2% below the baseline's
ATTAINMENT_MARGIN = 0.02  # ... and its SLO attainment no more than 2 points below the baseline's


def slo_capacity(records: list[dict], design: str) -> float | None:
    """The highest swept rate up to which every rate has at least 90% of its requests within both SLOs."""
    best = None
    for r in sorted((r for r in records if r["design"] == design), key=lambda r: r["offered_rate_per_s"]):
        if r["slo_attainment"] is None:  # no request drawn at that rate: it says nothing
            continue
        if r["slo_attainment"] < SLO_CAPACITY_ATTAINMENT:
            break
        best = r["offered_rate_per_s"]
    return best


def _tpot_no_better(mine: dict, theirs: dict) -> bool:
    """The design's median TPOT is not 2% below the baseline's (False where either has none)."""
    a, b = mine["tpot_s"]["p50"], theirs["tpot_s"]["p50"]
    return a is not None and b is not None and a > (1 - TPOT_MARGIN) * b


def _attainment_lower(mine: dict, theirs: dict) -> bool:
    a, b = mine["slo_attainment"], theirs["slo_attainment"]
    return a is not None and b is not None and a < b - ATTAINMENT_MARGIN


def crossovers(records: list[dict], design: str, baselines: list[str], with_slos: bool = True) -> list[dict]:
    """Per baseline, along the sweep: the first rate from which the design stops paying for good —
    its median TPOT no longer 2% below the baseline's, or (with SLOs) its SLO attainment over 2 points
    below — and, with SLOs, each side's SLO capacity (None: pays over the whole sweep; no rate sustained)."""
    def series(name: str) -> dict:
        return {r["offered_rate_per_s"]: r for r in records if r["design"] == name}

    mine, out = series(design), []
    for base in baselines:
        theirs = series(base)
        rates = sorted(set(mine) & set(theirs))
        tpot = [_tpot_no_better(mine[x], theirs[x]) for x in rates]
        slo = [with_slos and _attainment_lower(mine[x], theirs[x]) for x in rates]
        out.append({"design": design, "baseline": base,
                    "stops_paying_from_rate": first_rate_where(rates, [a or b for a, b in zip(tpot, slo)]),
                    "tpot_no_better_from_rate": first_rate_where(rates, tpot),
                    "slo_attainment_lower_from_rate": first_rate_where(rates, slo) if with_slos else None,
                    "design_slo_capacity_per_s": slo_capacity(records, design) if with_slos else None,
                    "baseline_slo_capacity_per_s": slo_capacity(records, base) if with_slos else None})
    return out


def _rate(value, none: str) -> str:
    return none if value is None else f"{value:g} requests/s"


def crossover_text(c: dict, with_slos: bool) -> str:
    """One line per baseline for the terminal."""
    text = f"design against {c['baseline']}: "
    if c["stops_paying_from_rate"] is None:
        text += "pays over the whole sweep"
    else:
        text += (f"stops paying from {_rate(c['stops_paying_from_rate'], '')}: at every rate from there its median "
                 "TPOT is no more than 2% better" + (" or its SLO attainment over 2 points lower" if with_slos else ""))
        for key, what in (("tpot_no_better_from_rate", "TPOT no better"),
                          ("slo_attainment_lower_from_rate", "attainment lower")):
            if c[key] is not None and (key != "tpot_no_better_from_rate" or with_slos):
                text += f" ({what} from {_rate(c[key], '')})"
    if with_slos:
        text += (f"; within the SLOs it sustains {_rate(c['design_slo_capacity_per_s'], 'no swept rate')}, "
                 f"{c['baseline']} {_rate(c['baseline_slo_capacity_per_s'], 'no swept rate')}")
    return text


def ms(value) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _number(value, text: str) -> str:
    return "-" if value is None else text.format(value)


def serving_rows(records: list[dict]) -> list[list[str]]:
    """Table rows: design, offered rate, TTFT and TPOT percentiles, throughput, goodput, SLO share,
    batch, speculative share, J, $ ('-' where a run has none)."""
    return [[r["design"], f"{r['offered_rate_per_s']:g}", ms(r["ttft_s"]["p50"]), ms(r["ttft_s"]["p99"]),
             ms(r["tpot_s"]["p50"]), ms(r["tpot_s"]["p90"]), ms(r["tpot_s"]["p99"]), f"{r['throughput_tokens_per_s']:.0f}",
             f"{r['goodput_requests_per_s']:.2f}",
             _number(None if r["slo_attainment"] is None else 100 * r["slo_attainment"], "{:.0f}%"),
             f"{r['mean_decode_batch']:.1f}", f"{100 * r['speculative_share']:.0f}%",
             _number(r["j_per_token"], "{:.3f}"), _number(r["usd_per_mtoken"], "{:.3f}")] for r in records]


SERVING_HEADER = ["design", "offered req/s", "TTFT p50 ms", "TTFT p99", "TPOT p50 ms", "TPOT p90", "TPOT p99", "tokens/s",
                  "goodput req/s", "SLO met", "batch", "spec", "J/token", "$/Mtoken"]
