"""Link time alpha + bytes / beta per hop, against hand arithmetic."""

import numpy as np
import pytest

from dfvg_dse.costs import link_bound_names, link_time


def test_host_staged_token_records_are_latency_bound(catalog):
    link = catalog.link("pcie-gen4-x16-host-staged")
    record = 8 * 16  # k = 8 DFVG token records of 16 bytes (DFVG, ASPLOS 2026)
    t = link_time(link, record)
    beta = link.bandwidth_bytes_per_s * link.efficiency
    expected = link.hops * (link.latency_s + record / beta) + link.software_overhead_s
    assert float(t.time_s) == pytest.approx(expected)
    assert link.hops == 2 and str(link_bound_names(t.bound)) == "latency"
    # the payload itself is ~5 ns at 25 GB/s: the fixed costs dominate by three orders of magnitude
    assert float(t.transfer_time_s) < 1e-3 * float(t.latency_time_s)


def test_large_transfers_are_bandwidth_bound_and_linear(catalog):
    link = catalog.link("pcie-gen4-x16-p2p")
    t = link_time(link, np.array([1e9, 2e9]))
    assert list(link_bound_names(t.bound)) == ["bandwidth", "bandwidth"]
    assert t.time_s[1] - t.time_s[0] == pytest.approx(1e9 / (0.8 * 31.5e9), rel=0.01)


def test_link_energy_counts_bits_per_hop(catalog):
    link = catalog.link("pcie-gen4-x16-host-staged")
    assert float(link_time(link, 1000).energy_j) == pytest.approx(2 * 1000 * 8 * link.energy_j_per_bit)
