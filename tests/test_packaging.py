"""A normal (non-editable) install carries models/ and hwdb/ and finds them from any directory."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not (ROOT / "pyproject.toml").is_file():
        pytest.fail("tests must run from a source checkout")
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: hatchling comes with the test extra, so this works offline.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True)
    (built,) = out.glob("dfvg_dse-*.whl")
    return built


@pytest.mark.slow
def test_wheel_contains_the_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("hwdb/gpu/rtx-4090.toml", "hwdb/fpga/v80.toml", "hwdb/defaults.toml", "models/llama-2-7b.toml",
                 "models/reference/target/model.safetensors", "models/reference/prompts.jsonl"):
        assert f"dfvg_dse/_data/{data}" in names
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "hwdb").rglob("*.toml")}
    assert {f"dfvg_dse/_data/{p}" for p in shipped} <= names
    assert "cli.py" not in names  # the top-level shim stays out of the wheel


@pytest.mark.slow
def test_installed_command_finds_its_data_from_any_directory(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFVG_DSE_")}
    env["PYTHONPATH"] = str(target)
    script = target / "bin" / "dfvg-dse"
    result = subprocess.run([sys.executable, str(script), "hw", "show", "v80", "--json"], cwd=elsewhere, env=env,
                            capture_output=True, text=True, check=True)
    path = Path(json.loads(result.stdout)["path"])
    assert path.is_relative_to(target / "dfvg_dse" / "_data" / "hwdb")
    result = subprocess.run([sys.executable, "-m", "dfvg_dse", "cost", "--model", "qwen3-8b", "--device", "rtx-4090",
                             "--json"], cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout)["bound"] == "memory"
