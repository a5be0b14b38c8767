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
        if r["slo_attainment"] < SLO_CAPACITY_ATTAINMENT:
            break
        best = r["offered_rate_per_s"]
    return best


def crossovers(records: list[dict], design: str, baselines: list[str]) -> list[dict]:
    """Per baseline, along the sweep: the first rate from which the design stops paying for good —
    its median TPOT no longer 2% below the baseline's, or its SLO attainment over 2 points below —
    and each side's SLO capacity (None: the design pays over the whole sweep; no rate sustained)."""
    def series(name: str) -> dict:
        return {r["offered_rate_per_s"]: r for r in records if r["design"] == name}

    mine, out = series(design), []
    for base in baselines:
        theirs = series(base)
        rates = sorted(set(mine) & set(theirs))
        tpot = [(mine[x]["tpot_s"]["p50"] or 0) > (1 - TPOT_MARGIN) * (theirs[x]["tpot_s"]["p50"] or 0) for x in rates]
        slo = [mine[x]["slo_attainment"] < theirs[x]["slo_attainment"] - ATTAINMENT_MARGIN for x in rates]
        out.append({"design": design, "baseline": base,
                    "stops_paying_from_rate": first_rate_where(rates, [a or b for a, b in zip(tpot, slo)]),
                    "tpot_no_better_from_rate": first_rate_where(rates, tpot),
                    "slo_attainment_lower_from_rate": first_rate_where(rates, slo),
                    "design_slo_capacity_per_s": slo_capacity(records, design),
                    "baseline_slo_capacity_per_s": slo_capacity(records, base)})
    return out


def ms(value) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def serving_rows(records: list[dict]) -> list[list[str]]:
    """Table rows: design, rate, TTFT and TPOT percentiles, throughput, goodput, SLO share, batch, J, $."""
    return [[r["design"], f"{r['offered_rate_per_s']:g}", ms(r["ttft_s"]["p50"]), ms(r["ttft_s"]["p99"]),
             ms(r["tpot_s"]["p50"]), ms(r["tpot_s"]["p90"]), ms(r["tpot_s"]["p99"]), f"{r['throughput_tokens_per_s']:.0f}",
             f"{r['goodput_requests_per_s']:.2f}", f"{100 * r['slo_attainment']:.0f}%", f"{r['mean_decode_batch']:.1f}",
             f"{100 * r['speculative_share']:.0f}%", f"{r['j_per_token']:.3f}",
             "-" if r["usd_per_mtoken"] is None else f"{r['usd_per_mtoken']:.3f}"] for r in records]


SERVING_HEADER = ["design", "req/s", "TTFT p50 ms", "TTFT p99", "TPOT p50 ms", "TPOT p90", "TPOT p99", "tokens/s",
                  "goodput req/s", "SLO met", "batch", "spec", "J/token", "$/Mtoken"]
