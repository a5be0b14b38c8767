"""The sole reader of `models/` and `hwdb/` (see `lookup` for the search path and `hardware`,
`models` for the file formats): every data file is parsed, converted to SI and validated here."""

from dfvg_dse.catalog._io import HwEntry, ModelEntry, Quantity
from dfvg_dse.catalog.errors import CatalogError, DataError, UnknownNameError
from dfvg_dse.catalog.lookup import (ENV_DIRS, HW_KINDS, Catalog, data_search_path, shipped_data_dir,
                                     user_data_dir)

__all__ = ["Catalog", "CatalogError", "DataError", "HwEntry", "ModelEntry", "Quantity", "UnknownNameError",
           "data_search_path", "shipped_data_dir", "user_data_dir", "HW_KINDS", "ENV_DIRS"]
