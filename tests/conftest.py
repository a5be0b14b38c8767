"""Shared fixtures: the shipped catalog, temp copies of the data, hypothesis profiles."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from dfvg_dse.catalog import Catalog

# No deadline: a slow shared machine must not fail a correct test. CI draws the same examples.
settings.register_profile("dev", deadline=None, max_examples=100)
settings.register_profile("ci", deadline=None, max_examples=100, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    """No test writes to the real results/, and no user setting leaks in."""
    monkeypatch.setenv("DFVG_DSE_RESULTS_DIR", str(tmp_path_factory.mktemp("results")))
    monkeypatch.delenv("DFVG_DSE_MODELS_DIR", raising=False)
    monkeypatch.delenv("DFVG_DSE_HWDB_DIR", raising=False)


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog.open()


@pytest.fixture
def hwdb_copy(tmp_path, catalog) -> Path:
    """A writable copy of the shipped hardware database."""
    target = tmp_path / "hwdb"
    shutil.copytree(catalog.hwdb_dir, target)
    return target


@pytest.fixture
def models_copy(tmp_path, catalog) -> Path:
    """A writable copy of the shipped model database."""
    target = tmp_path / "models"
    shutil.copytree(catalog.models_dir, target)
    return target
