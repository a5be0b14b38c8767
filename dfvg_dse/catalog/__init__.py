"""The sole reader of `models/` and `hwdb/`: locate the directories, parse, convert once, validate.

Vendor units become SI here (units.to_si) and nowhere else. Every problem with a file raises a
`CatalogError` whose message is one line naming the file, the field, the value and what is
allowed; unknown names suggest the closest known ones. Data directories resolve in this order:
an explicit argument (the CLI's --models-dir / --hwdb-dir), the environment variable
(DFVG_DSE_MODELS_DIR / DFVG_DSE_HWDB_DIR), the copy packaged in the wheel, then the repository
root beside the package (a source checkout).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from dfvg_dse.catalog._io import HwEntry, ModelEntry, Quantity, read_json, read_toml
from dfvg_dse.catalog.errors import CatalogError, DataError, UnknownNameError
from dfvg_dse.catalog.hardware import parse_defaults, parse_device, parse_link
from dfvg_dse.catalog.models import model_document, model_spec_from_hf_config, parse_model
from dfvg_dse.specs import CalibrationDefaults, DeviceSpec, LinkSpec, ModelSpec

__all__ = ["Catalog", "CatalogError", "DataError", "HwEntry", "ModelEntry", "Quantity", "UnknownNameError",
           "resolve_data_dir", "HW_KINDS", "ENV_DIRS"]

ENV_DIRS = {"models": "DFVG_DSE_MODELS_DIR", "hwdb": "DFVG_DSE_HWDB_DIR"}
HW_KINDS = ("fpga", "gpu", "cpu", "link")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def resolve_data_dir(which: str, explicit: str | Path | None = None) -> Path:
    """Where `models` or `hwdb` data is read from (see the module docstring for the order)."""
    if explicit is not None:
        if not Path(explicit).is_dir():
            raise CatalogError(f"--{which}-dir {explicit}: no such directory")
        return Path(explicit)
    env = os.environ.get(ENV_DIRS[which])
    if env:
        if not Path(env).is_dir():
            raise CatalogError(f"{ENV_DIRS[which]}={env}: no such directory")
        return Path(env)
    packaged = Path(str(resources.files("dfvg_dse") / "_data" / which))
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent.parent / which


@dataclass(frozen=True)
class Catalog:
    """Lookup by exact name in one models directory and one hwdb directory."""

    models_dir: Path
    hwdb_dir: Path

    @classmethod
    def open(cls, models_dir: str | Path | None = None, hwdb_dir: str | Path | None = None) -> Catalog:
        return cls(resolve_data_dir("models", models_dir), resolve_data_dir("hwdb", hwdb_dir))

    # -- models ---------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return sorted(p.stem for p in self.models_dir.glob("*.toml"))

    def model_entry(self, name: str) -> ModelEntry:
        path = self.models_dir / f"{name}.toml"
        if not NAME_RE.match(name) or not path.is_file():
            raise UnknownNameError("model", name, self.model_names())
        return parse_model(path, read_toml(path))

    def model(self, name: str) -> ModelSpec:
        return self.model_entry(name).spec

    def model_entries(self) -> list[ModelEntry]:
        return [self.model_entry(n) for n in self.model_names()]

    # -- hardware -------------------------------------------------------------------------
    def defaults_entry(self) -> tuple[CalibrationDefaults, dict[str, Quantity]]:
        path = self.hwdb_dir / "defaults.toml"
        if not path.is_file():
            raise CatalogError(f"{path}: missing; the hardware database needs its calibration defaults")
        return parse_defaults(path, read_toml(path))

    def defaults(self) -> CalibrationDefaults:
        return self.defaults_entry()[0]

    def hw_names(self, kind: str | None = None) -> list[str]:
        kinds = HW_KINDS if kind is None else (kind,)
        return sorted(p.stem for k in kinds for p in (self.hwdb_dir / k).glob("*.toml"))

    def _hw_path(self, name: str, kinds: tuple[str, ...], what: str) -> tuple[Path, str]:
        if NAME_RE.match(name):
            for kind in kinds:
                path = self.hwdb_dir / kind / f"{name}.toml"
                if path.is_file():
                    return path, kind
        raise UnknownNameError(what, name, sorted(n for k in kinds for n in self.hw_names(k)))

    def hw_entry(self, name: str, kinds: tuple[str, ...] = HW_KINDS, what: str = "hardware entry") -> HwEntry:
        path, kind = self._hw_path(name, kinds, what)
        data = read_toml(path)
        if kind == "link":
            return parse_link(path, data, self.defaults())
        return parse_device(path, data, kind, self.defaults())

    def device(self, name: str) -> DeviceSpec:
        return self.hw_entry(name, ("fpga", "gpu", "cpu"), "device").spec

    def link(self, name: str) -> LinkSpec:
        return self.hw_entry(name, ("link",), "link").spec

    def hw_entries(self, kind: str | None = None) -> list[HwEntry]:
        kinds = HW_KINDS if kind is None else (kind,)
        return [self.hw_entry(n, (k,)) for k in kinds for n in self.hw_names(k)]

    # -- import ---------------------------------------------------------------------------
    def import_model(self, config_path: str | Path, name: str, source: str | None = None,
                     tag: str = "unverified", out_dir: str | Path | None = None,
                     force: bool = False) -> tuple[Path, ModelSpec]:
        """Turn a Hugging Face config.json into models/NAME.toml (atomically); returns its path."""
        if not NAME_RE.match(name):
            raise CatalogError(f"--name {name!r}: use lower-case letters, digits, '.', '_' and '-'")
        config_path = Path(config_path)
        config = read_json(config_path)
        spec = model_spec_from_hf_config(config_path, config, name, name, source or str(config_path))
        target_dir = Path(out_dir) if out_dir is not None else self.models_dir
        target = target_dir / f"{name}.toml"
        if target.exists() and not force:
            raise CatalogError(f"{target}: already exists; pass --force to replace it")
        document = model_document(config, name, source or f"imported from {config_path.resolve()}", tag)
        write_toml_atomic(target, document)
        parse_model(target, read_toml(target))  # the file we wrote must read back
        return target, spec


def write_toml_atomic(path: Path, document: dict) -> None:
    """Write a TOML document through a temporary file and a rename, so no half file is left."""
    import tomli_w  # only the import path writes TOML

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            tomli_w.dump(document, out)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
