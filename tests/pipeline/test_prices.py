"""Hourly prices (issue 17): rented GPUs carry a dated price, so $ per million tokens prints by
default where every device of a design is rented; it is the price per second over the tokens per
second, a group pays for each GPU, and a device nobody rents (an Alveo V80) leaves it unset."""

from __future__ import annotations

import json

import pytest

RENTED = ["h100-sxm", "h100-pcie", "h200", "b200", "a100-80gb", "a100-80gb-pcie", "a100-40gb", "l40s", "rtx-4090", "a10"]


@pytest.mark.parametrize("name", RENTED)
def test_rented_gpus_carry_a_dated_sourced_price(catalog, name):
    entry = catalog.hw_entry(name, ("gpu",))
    price = entry.quantities["price_per_hour"]
    assert 0.1 < price.value < 20 and price.unit == "USD/h"
    assert "2026-" in price.source and "http" in price.source


@pytest.mark.parametrize("verify", ["h100-sxm", "4xh100-sxm"])
def test_usd_per_mtoken_is_the_price_over_the_throughput(run, catalog, verify):
    out = json.loads(run("estimate", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--verify-device", verify,
                         "--acceptance", "0.8", "--tree", "chain:4", "--json").stdout)
    per_gpu_hour = catalog.hw_entry("h100-sxm", ("gpu",)).quantities["price_per_hour"].value
    gpus = 4 if verify.startswith("4x") else 1
    expected = gpus * per_gpu_hour / 3600 / out["tokens_per_s"] * 1e6
    assert out["usd_per_mtoken"] == pytest.approx(expected, rel=1e-9)


def test_a_device_nobody_rents_leaves_the_cost_unset(run):
    out = json.loads(run("estimate", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--draft-device", "v80",
                         "--verify-device", "h100-sxm", "--acceptance", "0.8", "--tree", "chain:4", "--json").stdout)
    assert out["usd_per_mtoken"] is None
