import math

import pytest

from dfvg_dse import units


@pytest.mark.parametrize("value, unit, dimension, expected", [
    (1008, "GB/s", units.BYTES_PER_S, 1.008e12),
    (3.35, "TB/s", units.BYTES_PER_S, 3.35e12),
    (100, "Gb/s", units.BYTES_PER_S, 12.5e9),  # 100 GbE carries 12.5 GB/s
    (165.2, "TFLOPS", units.FLOP_PER_S, 165.2e12),
    (300, "MHz", units.HZ, 3e8),
    (84, "MiB", units.BYTES, 84 * 1048576),
    (10, "us", units.SECONDS, 1e-5),
    (7, "pJ/bit", units.J_PER_BIT, 7e-12),
    (3.6, "USD/h", units.USD_PER_S, 1e-3),
])
def test_to_si_converts_vendor_units(value, unit, dimension, expected):
    assert math.isclose(units.to_si(value, unit, dimension), expected, rel_tol=1e-12)


def test_to_si_rejects_unit_of_another_dimension():
    with pytest.raises(ValueError, match=r"unit 'GB' is not a unit of bandwidth; allowed: TB/s, GB/s"):
        units.to_si(1, "GB", units.BYTES_PER_S)


def test_every_unit_belongs_to_a_listed_dimension():
    dimensions = {units.FLOP_PER_S, units.BYTES_PER_S, units.BYTES, units.HZ, units.WATTS, units.SECONDS,
                  units.J_PER_BIT, units.USD_PER_S, units.COUNT, units.FRACTION}
    assert {dim for dim, _ in units.UNITS.values()} == dimensions
