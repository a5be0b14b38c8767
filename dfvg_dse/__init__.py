"""dfvg-dse: analytical design-space explorer for heterogeneous speculative decoding.

The draft model runs on one device (an FPGA in DFVG, ASPLOS 2026), the target model verifies on
another (a GPU), and a link joins them. This package models each stage's cost, the link, and
(in later modules) acceptance, schedules and the search over designs.
"""

from dfvg_dse.catalog import Catalog, CatalogError
from dfvg_dse.specs import DeviceSpec, LinkSpec, ModelSpec, SpecError, SystemSpec

__version__ = "0.1.0"

__all__ = ["Catalog", "CatalogError", "DeviceSpec", "LinkSpec", "ModelSpec", "SpecError", "SystemSpec",
           "__version__"]
