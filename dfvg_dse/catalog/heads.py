"""Parser of models/heads/NAME.toml: draft heads (issue 18; docs/data-format.md, "Draft heads").

A head file names its kind and target under [drafter] and keeps the head checkpoint's config.json
verbatim under [config] (EAGLE and EAGLE-3 heads are one-layer llama-family checkpoints); Medusa
heads and MTP modules take their widths from the target, so they have no [config]. Every problem is
one line naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dfvg_dse.catalog._io import NAME_RE, read_json, read_provenance, read_string, read_toml
from dfvg_dse.catalog.errors import _MISSING, CatalogError, DataError, UnknownNameError
from dfvg_dse.catalog.models import model_spec_from_hf_config
from dfvg_dse.specs import InputError, ModelSpec, SpecError
from dfvg_dse.specs.drafter import (FC_BIAS_DEFAULT, FEATURE_LAYERS_DEFAULT, HEAD_KINDS, LOOKUP_KINDS, LOOKUP_PARAMS,
                                    HeadSpec, LookupSpec)

HEAD_FIELDS = ("name", "display_name", "source", "tag", "notes", "drafter", "config")
# [drafter] key -> (HeadSpec field, type); kind and target are required
DRAFTER_KEYS = {"kind": ("kind", str), "target": ("target", str), "feature_layers": ("feature_layers", int),
                "fc_bias": ("fc_bias", bool), "medusa_num_heads": ("medusa_heads", int),
                "medusa_num_layers": ("medusa_layers", int)}
NEEDS_CONFIG = ("eagle", "eagle3")
LOOKUP_FIELDS = ("name", "display_name", "source", "tag", "notes", "drafter", "cost")
# [drafter] keys of each lookup kind (LOOKUP_PARAMS) and their types
LOOKUP_PARAM_TYPES = {"min_ngram": int, "max_ngram": int, "max_tree_depth": int, "max_spec_factor": float,
                      "min_token_prob": float}
LOOKUP_COST_KEYS = ("lookup_s_per_round", "lookup_s_per_context_token", "source")


@dataclass(frozen=True)
class HeadEntry:
    spec: HeadSpec
    path: Path
    tag: str


def _drafter_table(path: Path, data: dict) -> dict:
    table = data.get("drafter", _MISSING)
    if not isinstance(table, dict):
        raise DataError(path, "drafter", table, "needs a [drafter] table with kind and target")
    out = {}
    for key, value in table.items():
        if key not in DRAFTER_KEYS:
            raise DataError(path, f"drafter.{key}", value, f"unknown key; allowed: {', '.join(DRAFTER_KEYS)}")
        field, kind = DRAFTER_KEYS[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)) or not isinstance(value, kind):
            raise DataError(path, f"drafter.{key}", value, f"must be {'an integer' if kind is int else kind.__name__}")
        out[field] = value
    for key in ("kind", "target"):
        if key not in out:
            raise DataError(path, f"drafter.{key}", _MISSING, "required")
    if out["kind"] not in HEAD_KINDS:
        raise DataError(path, "drafter.kind", out["kind"], f"allowed: {', '.join(HEAD_KINDS)}")
    return out


def parse_head(path: Path, data: dict, target_of: Callable[[str], ModelSpec]) -> HeadEntry:
    """A HeadSpec from one head file; `target_of(name)` gives the target model (the catalog's)."""
    source, tag = read_provenance(path, data, HEAD_FIELDS, "draft head")
    if data.get("name") != path.stem:
        raise DataError(path, "name", data.get("name", _MISSING), f"must equal the file name '{path.stem}'")
    fields = _drafter_table(path, data)
    kind = fields["kind"]
    try:
        target = target_of(fields["target"])
    except CatalogError as err:
        raise CatalogError(f"{path}: drafter.target: {err}") from None
    if kind == "mtp" and not target.mtp_layers:
        raise DataError(path, "drafter.target", target.name, "has no multi-token-prediction module "
                        "(config num_nextn_predict_layers = 0): an mtp head drafts with the target's own")
    config = data.get("config")
    if kind in NEEDS_CONFIG and not isinstance(config, dict):
        raise DataError(path, "config", config if config is not None else _MISSING,
                        f"a {kind} head needs a [config] table: its checkpoint's config.json")
    if kind not in NEEDS_CONFIG and config is not None:
        raise DataError(path, "config", "[config]", f"a {kind} head takes its widths from the target: drop [config]")
    layer = model_spec_from_hf_config(path, config, data["name"]) if config is not None else \
        target if kind == "mtp" else None
    draft_vocab = 0
    if config is not None and "draft_vocab_size" in config:
        draft_vocab = config["draft_vocab_size"]
        if isinstance(draft_vocab, bool) or not isinstance(draft_vocab, int) or draft_vocab < 1:
            raise DataError(path, "config.draft_vocab_size", draft_vocab, "must be an integer >= 1")
    if config is not None and layer.vocab_size != target.vocab_size:
        raise DataError(path, "config.vocab_size", layer.vocab_size,
                        f"must equal the target's ({target.name}: {target.vocab_size})")
    try:
        spec = HeadSpec(name=data["name"], kind=kind, target=target, layer=layer,
                        feature_layers=fields.get("feature_layers", FEATURE_LAYERS_DEFAULT[kind]),
                        fc_bias=fields.get("fc_bias", FC_BIAS_DEFAULT[kind]), draft_vocab=draft_vocab,
                        medusa_heads=fields.get("medusa_heads", 0), medusa_layers=fields.get("medusa_layers", 0),
                        display_name=read_string(path, data, "display_name", data["name"]), source=source)
    except SpecError as err:
        where = "config" if err.field in ("hidden_size", "draft_vocab_size", "config") else "drafter"
        raise DataError(path, f"{where}.{err.field}", err.value, err.allowed) from None
    return HeadEntry(spec, path, tag)


@dataclass(frozen=True)
class LookupEntry:
    spec: LookupSpec
    path: Path
    tag: str


def _typed_table(path: Path, data: dict, table: str, keys: dict) -> dict:
    """A required table of `keys` (name -> type; float takes integers too), each one required."""
    values = data.get(table, _MISSING)
    if not isinstance(values, dict):
        raise DataError(path, table, values, f"needs a [{table}] table with {', '.join(keys)}")
    for key, value in values.items():
        if key not in keys:
            raise DataError(path, f"{table}.{key}", value, f"unknown key; allowed: {', '.join(keys)}")
    for key, kind in keys.items():
        value = values.get(key, _MISSING)
        if value is _MISSING:
            raise DataError(path, f"{table}.{key}", value, "required")
        number = kind is float and isinstance(value, int)
        if isinstance(value, bool) or not (isinstance(value, kind) or number):
            raise DataError(path, f"{table}.{key}", value, {int: "must be an integer", float: "must be a number",
                                                            str: "must be a string"}[kind])
    return values


def parse_lookup(path: Path, data: dict) -> LookupEntry:
    """A LookupSpec from one models/lookups/ file: [drafter] (kind and its parameters) and [cost]."""
    source, tag = read_provenance(path, data, LOOKUP_FIELDS, "lookup drafter")
    if data.get("name") != path.stem:
        raise DataError(path, "name", data.get("name", _MISSING), f"must equal the file name '{path.stem}'")
    kind = data.get("drafter", {}).get("kind", _MISSING) if isinstance(data.get("drafter"), dict) else _MISSING
    if kind not in LOOKUP_KINDS:
        raise DataError(path, "drafter.kind", kind, f"allowed: {', '.join(LOOKUP_KINDS)}")
    drafter = _typed_table(path, data, "drafter", {"kind": str} | {k: LOOKUP_PARAM_TYPES[k] for k in LOOKUP_PARAMS[kind]})
    cost = _typed_table(path, data, "cost", dict.fromkeys(LOOKUP_COST_KEYS[:2], float) | {"source": str})
    params = {k: (float(v) if LOOKUP_PARAM_TYPES[k] is float else v) for k, v in drafter.items() if k != "kind"}
    try:
        spec = LookupSpec(name=data["name"], **params,
                          lookup_s_per_round=float(cost["lookup_s_per_round"]),
                          lookup_s_per_context_token=float(cost["lookup_s_per_context_token"]),
                          cost_source=cost["source"], kind=drafter["kind"],
                          display_name=read_string(path, data, "display_name", data["name"]), source=source)
    except SpecError as err:
        where = "cost" if err.field.startswith("lookup_s") else "drafter"
        raise DataError(path, f"{where}.{err.field}", err.value, err.allowed) from None
    return LookupEntry(spec, path, tag)


class HeadLookup:
    """The catalog's draft heads (models/heads/ along the models search path) and `draft`, which takes
    a model or a head by name; mixed into Catalog, whose `_find`, `_names`, `model` it uses."""

    @staticmethod
    def read_head(folder: str | Path):
        """An EAGLE-style draft head folder, or `builtin:tiny-eagle` (the shipped tiny target's head):
        (config, ModelSpec of its layer, float32 tensors, folder)."""
        from dfvg_dse.catalog.checkpoints import read_head_checkpoint
        from dfvg_dse.catalog.lookup import shipped_data_dir

        if str(folder) == "builtin:tiny-eagle":
            folder = shipped_data_dir("models") / "reference" / "eagle"
        return (*read_head_checkpoint(folder), Path(folder))

    @staticmethod
    def is_head(folder: str) -> bool:
        """Whether a --draft names a draft head: builtin:tiny-eagle, or a folder whose config.json
        says ["EagleHead"]."""
        if folder == "builtin:tiny-eagle":
            return True
        config = Path(folder) / "config.json"
        return not folder.startswith("builtin:") and config.is_file() and \
            read_json(config).get("architectures") == ["EagleHead"]

    def head_names(self) -> list[str]:
        return self._names(self.models_dirs, "heads")

    def head_entry(self, name: str) -> HeadEntry:
        path = self._find(self.models_dirs, f"heads/{name}.toml") if NAME_RE.match(name) else None
        if path is None:
            raise UnknownNameError("draft head", name, self.head_names())
        return parse_head(path, read_toml(path), self.model)

    def head(self, name: str) -> HeadSpec:
        return self.head_entry(name).spec

    def lookup_names(self) -> list[str]:
        return self._names(self.models_dirs, "lookups")

    def lookup_entry(self, name: str) -> LookupEntry:
        path = self._find(self.models_dirs, f"lookups/{name}.toml") if NAME_RE.match(name) else None
        if path is None:
            raise UnknownNameError("lookup drafter", name, self.lookup_names())
        return parse_lookup(path, read_toml(path))

    def draft(self, name: str, target: str | None = None) -> ModelSpec:
        """A draft by name: a model of models/, a draft head of models/heads/ priced as a model
        (HeadSpec.as_model; a head must draft for `target` when one is named), or a lookup drafter of
        models/lookups/ priced for `target` (LookupSpec.as_model; it needs one)."""
        if name not in self.model_names() and name in self.lookup_names():
            if target is None:
                raise InputError(f"lookup drafter '{name}' drafts for any target: name the --target")
            return self.lookup_entry(name).spec.as_model(self.model(target))
        if name in self.model_names() or name not in self.head_names():
            try:
                return self.model(name)
            except UnknownNameError:
                others = self.head_names() + self.lookup_names()
                raise UnknownNameError("draft model, head or lookup", name, self.model_names() + others) from None
        head = self.head(name)
        if target is not None and head.target.name != target:
            raise InputError(f"draft head '{name}' drafts for {head.target.name}, not {target}: a head reads its "
                             "own target's hidden states (dfvg-dse models heads)")
        try:
            return head.as_model()
        except SpecError as err:
            raise InputError(f"draft head '{name}': {err.allowed}") from None
