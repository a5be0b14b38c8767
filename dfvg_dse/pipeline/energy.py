"""Energy and cost per token (docs/pipeline.md, "Energy"): power x busy time + idle power x idle time + link bits.

Every device in the design draws its decode power while busy and its idle power for the rest of
the cycle; one device that drafts and verifies is busy for both. J/token = energy per cycle /
tokens per cycle. The AR baseline is the target alone on the verify device, busy all the time;
`ar_devices` = 2 reproduces the DFVG paper's baselines, which ran on two GPUs. Host CPU power is
not modelled. $ per million tokens uses each device's price per hour when every device has one.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dfvg_dse.pipeline.rounds import StageTimes
from dfvg_dse.pipeline.schedule import Timeline
from dfvg_dse.specs import DecodeConfig


class EnergyEstimate(NamedTuple):
    j_per_token: float
    tokens_per_j: float
    ar_j_per_token: float
    energy_efficiency_vs_ar: float  # (tokens/J) / (tokens/J of AR on one verify device)
    energy_efficiency_vs_ar_2dev: float  # against an AR baseline that powers two such devices
    draft_energy_j: float  # per cycle
    verify_energy_j: float
    link_energy_j: float
    usd_per_mtoken: float | None


def device_energy_j(power_w, idle_w, busy_s, cycle_s):
    """Energy of one device over a cycle, elementwise: busy at decode power, idle for the rest."""
    return power_w * busy_s + idle_w * np.maximum(0.0, cycle_s - busy_s)


def devices_price_usd_per_s(devices) -> float | None:
    """What a design's devices cost per second together (a group pays for each GPU); None when one
    has no price."""
    prices = [d.price_usd_per_s for d in devices]
    return None if any(p is None for p in prices) else float(sum(prices))


def usd_per_mtoken(price_usd_per_s, tokens_per_s):
    """Dollars per million tokens, elementwise: the devices' price per second over the tokens per second."""
    return price_usd_per_s / tokens_per_s * 1e6


def energy(config: DecodeConfig, times: StageTimes, line: Timeline) -> EnergyEstimate:
    """Energy per token of a design and of its AR baseline."""
    draft, verify = config.system.draft, config.system.verify
    cycle = line.cycle_s
    if config.schedule == "ar" or draft.name == verify.name:
        busy = min(cycle, line.draft_busy_s + line.verify_busy_s)
        e_verify, e_draft = device_energy_j(verify.decode_power_w, verify.idle_power_w, busy, cycle), 0.0
    else:
        e_draft = device_energy_j(draft.decode_power_w, draft.idle_power_w, line.draft_busy_s, cycle)
        e_verify = device_energy_j(verify.decode_power_w, verify.idle_power_w, line.verify_busy_s, cycle)
    e_draft, e_verify = float(e_draft), float(e_verify)
    total = e_draft + e_verify + times.link_energy_j
    j_per_token = total / line.tokens
    ar_j = verify.decode_power_w * times.ar_step_s / config.batch
    devices = [verify] if config.schedule == "ar" or draft.name == verify.name else [draft, verify]
    price = devices_price_usd_per_s(devices)
    usd = None if price is None else float(usd_per_mtoken(price, line.tokens / cycle))
    return EnergyEstimate(j_per_token, 1.0 / j_per_token, ar_j, ar_j / j_per_token, 2 * ar_j / j_per_token,
                          e_draft, e_verify, times.link_energy_j, usd)
