"""Shared fixtures: the shipped catalog, temp copies of the data, hypothesis profiles."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from click.testing import CliRunner

from dfvg_dse.catalog import Catalog
from dfvg_dse.pipeline.grid import SearchSpace
from dfvg_dse.cli import cli

# No deadline: a slow shared machine must not fail a correct test. CI draws the same examples.
settings.register_profile("dev", deadline=None, max_examples=100)
settings.register_profile("ci", deadline=None, max_examples=100, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(autouse=True, scope="session")
def _isolated_user_dir(tmp_path_factory):
    """The user's own data directory (XDG_DATA_HOME) points at an empty temp folder for the session."""
    saved = {k: os.environ.get(k) for k in ("XDG_DATA_HOME", "DFVG_DSE_MODELS_DIR", "DFVG_DSE_HWDB_DIR")}
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg"))
    os.environ.pop("DFVG_DSE_MODELS_DIR", None)
    os.environ.pop("DFVG_DSE_HWDB_DIR", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    """No test writes to the real results/ or the user data directory, and no user setting leaks in."""
    monkeypatch.setenv("DFVG_DSE_RESULTS_DIR", str(tmp_path_factory.mktemp("results")))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg")))
    monkeypatch.delenv("DFVG_DSE_MODELS_DIR", raising=False)
    monkeypatch.delenv("DFVG_DSE_HWDB_DIR", raising=False)


@pytest.fixture
def run():
    """The command line through click's CliRunner (stdout and stderr apart); exceptions propagate."""
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args), catch_exceptions=False)


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


@pytest.fixture(scope="module")
def small_space(catalog) -> SearchSpace:
    gpu, v80 = catalog.device("rtx-4090"), catalog.device("v80")
    return SearchSpace(catalog.model("qwen3-8b"), catalog.model("qwen3-0.6b").with_dtypes("bfloat16", "bfloat16"),
                       catalog.acceptance("pair:qwen3-8b/qwen3-0.6b"), (gpu,), (v80, gpu),
                       (("v80", catalog.link("pcie-gen4-x16-host-staged")),), families=("chain", "seq", "optimal"),
                       widths=(1, 2, 4), depths=(2, 4, 6), budgets=(8, 16), batches=(1, 2),
                       fpga_pe_fractions=(0.5, 1.0), fpga_clocks_mhz=(300.0,),
                       sync_s=catalog.defaults().sync_per_round_s)
