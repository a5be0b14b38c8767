"""The sole reader of `models/` and `hwdb/`: locate the directories, parse, convert once, validate.

Vendor units become SI here (units.to_si) and nowhere else. Every problem with a file raises a
`CatalogError` whose message is one line naming the file, the field, the value and what is
allowed; unknown names suggest the closest known ones.

Each database is a search path, first match wins: the directories given explicitly (the CLI's
--models-dir / --hwdb-dir, several joined with the OS path separator) or else those in
DFVG_DSE_MODELS_DIR / DFVG_DSE_HWDB_DIR; then the user's own directory
($XDG_DATA_HOME/dfvg-dse/{models,hwdb}, default ~/.local/share/dfvg-dse/...) when it exists;
then the shipped data (the copy packaged in the wheel, or the repository root in a checkout).
Your entries therefore add to the shipped ones and may override them by name (of the same kind:
one name under two hwdb kinds, or two profiles of one name in one folder, is an error naming both files).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from dfvg_dse.catalog._io import (NAME_RE, HwEntry, ModelEntry, Quantity, check_regular_file, read_json, read_jsonl,
                                  read_toml)
from dfvg_dse.catalog.errors import CatalogError, DataError, UnknownNameError
from dfvg_dse.catalog.hardware import parse_defaults, parse_device, parse_link
from dfvg_dse.catalog.deploy import parse_engine_support
from dfvg_dse.catalog.engines import parse_engine
from dfvg_dse.catalog.measurements import name_check, parse_measurements, read_measurements
from dfvg_dse.catalog.models import model_document, model_spec_from_hf_config, parse_model
from dfvg_dse.catalog.heads import HeadLookup
from dfvg_dse.catalog.profiles import parse_profile, profile_document, read_tree_document
from dfvg_dse.catalog.studies import check_study
from dfvg_dse.catalog.traces import read_trace_file
from dfvg_dse.catalog.workloads import read_workload, workload_names
from dfvg_dse.files import atomic_write_all, path_text
from dfvg_dse.specs import (AcceptanceProfile, CalibrationDefaults, DeviceSpec, InputError, LinkSpec, ModelSpec,
                            SpecError)
from dfvg_dse.specs.hardware import shorten
from dfvg_dse.specs.deploy import EngineSupport, version_key
from dfvg_dse.specs.engines import EngineProfile
from dfvg_dse.specs.measurements import MeasurementSource
from dfvg_dse.specs.serving import Workload
from dfvg_dse.specs.parallel import (colocated_draft_device, group_device, group_name, implied_tensor,
                                     parse_group_name)
from dfvg_dse.specs.hardware import show_value as shown

ENV_DIRS = {"models": "DFVG_DSE_MODELS_DIR", "hwdb": "DFVG_DSE_HWDB_DIR"}
HW_KINDS = ("fpga", "gpu", "cpu", "link")
ROOFLINE = "roofline"  # the engine name of the plain roofline (no profile)
BUILTIN_PAIRS = {"builtin:tiny": "", "builtin:small": "small"}  # under models/reference/
# The engine whose fitted profile prices GPU forwards when a command is not told otherwise:
# TensorRT-LLM, the best tuned of the engines with published measurements (docs/engines.md).
DEFAULT_ENGINE = "trtllm"
FILE_SUFFIXES = (".json", ".toml", ".jsonl")  # a SPEC ending so is meant as a file
def _is_file(path: Path) -> bool:
    """Path.is_file that says False for a name the OS cannot hold (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def existing_file(path: str | Path, what: str) -> Path:
    """A FILE option's value as a Path; one short line when it names no file (or a folder)."""
    if _is_file(Path(path)):
        return Path(path)
    if spec_file(str(path), what) is None:  # raises for folders and path-like names
        raise InputError(f"{what}: no such file: {shown(str(path), keep_end=True)}")
    return Path(path)


def spec_file(spec: str, what: str) -> Path | None:
    """The file that a `--x SPEC or FILE` value names, or None when the value is an inline SPEC.

    An existing file wins. A value that looks like a path (a separator, or a .json/.toml/.jsonl
    suffix) but is no file is an error ("no such file"), not the inline syntax's help. Anything
    else, including a string too long to be a file name, is inline.
    """
    path = Path(spec)
    if _is_file(path):
        return path
    try:
        folder = path.is_dir()
    except (OSError, ValueError):
        folder = False
    if folder:
        raise InputError(f"{what}: {shown(spec, keep_end=True)} is a folder, not a file")
    try:  # it exists but is no regular file (/dev/zero, /dev/stdin, a FIFO): reading it would never end
        check_regular_file(path)
    except CatalogError as err:
        raise InputError(f"{what}: {err}") from None
    if _names_a_file(spec):
        raise InputError(f"{what}: no such file: {shown(spec, keep_end=True)}")
    return None


def _names_a_file(spec: str) -> bool:
    """Whether a SPEC value is meant as a file: a path separator or a .json/.toml/.jsonl suffix
    (pair:NAME, numbers and inline trees are not)."""
    separators = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    return not spec.startswith("pair:") and (any(sep in spec for sep in separators)
                                             or spec.lower().endswith(FILE_SUFFIXES))


def shipped_data_dir(which: str) -> Path:
    """The data that comes with the package: the wheel's copy, else the checkout's root folder."""
    packaged = Path(str(resources.files("dfvg_dse") / "_data" / which))
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent.parent / which


def user_data_dir(which: str) -> Path:
    """The user's own entries: $XDG_DATA_HOME/dfvg-dse/WHICH (default ~/.local/share/dfvg-dse/WHICH)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "dfvg-dse" / which


def _chosen_dirs(which: str, explicit: str | Path | None) -> list[Path]:
    """Directories named by the option or, failing that, the environment variable; each must exist."""
    if explicit is not None:
        label, value = f"--{which}-dir", str(explicit)
    else:
        label, value = ENV_DIRS[which], os.environ.get(ENV_DIRS[which], "")
    dirs = [Path(part) for part in value.split(os.pathsep) if part]
    for path in dirs:
        if not path.is_dir():
            raise CatalogError(f"{label} {path}: no such directory")
    return dirs


def data_search_path(which: str, explicit: str | Path | None = None) -> tuple[Path, ...]:
    """The directories searched for `models` or `hwdb`, first match first (see the module docstring)."""
    dirs = _chosen_dirs(which, explicit)
    if user_data_dir(which).is_dir():
        dirs.append(user_data_dir(which))
    dirs.append(shipped_data_dir(which))
    unique: list[Path] = []
    for path in dirs:
        if path.resolve() not in {u.resolve() for u in unique}:
            unique.append(path)
    return tuple(unique)


@dataclass(frozen=True)
class Catalog(HeadLookup):
    """Lookup by exact name along a search path of models directories and of hwdb directories.

    `import_dir` is where `models import` writes when told nothing else: the first directory the
    user named, else the user data directory.
    """

    models_dirs: tuple[Path, ...]
    hwdb_dirs: tuple[Path, ...]
    import_dir: Path
    engine_name: str = "roofline"  # the engine whose profile prices GPUs (with_engine)

    @classmethod
    def open(cls, models_dir: str | Path | None = None, hwdb_dir: str | Path | None = None) -> Catalog:
        chosen = _chosen_dirs("models", models_dir)
        return cls(data_search_path("models", models_dir), data_search_path("hwdb", hwdb_dir),
                   chosen[0] if chosen else user_data_dir("models"))

    @property
    def models_dir(self) -> Path:
        """The first models directory searched."""
        return self.models_dirs[0]

    @property
    def hwdb_dir(self) -> Path:
        """The first hwdb directory searched."""
        return self.hwdb_dirs[0]

    @staticmethod
    def is_file(path: str | Path) -> bool:
        """Whether `path` names a file; False (no OSError) for a string the OS cannot hold as a name."""
        return _is_file(Path(path))

    @staticmethod
    def _find(dirs: tuple[Path, ...], relative: str) -> Path | None:
        for directory in dirs:
            if _is_file(directory / relative):
                return directory / relative
        return None

    @staticmethod
    def _names(dirs: tuple[Path, ...], sub: str = "") -> list[str]:
        # Only well-named regular files are entries: editor backups, hidden files and stray folders are ignored.
        return sorted({p.stem for d in dirs for p in (d / sub).glob("*.toml")
                       if p.stem != "defaults" and NAME_RE.match(p.stem) and p.is_file()})

    # -- models ---------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return self._names(self.models_dirs)

    def model_entry(self, name: str) -> ModelEntry:
        path = self._find(self.models_dirs, f"{name}.toml") if NAME_RE.match(name) else None
        if path is None:
            raise UnknownNameError("model", name, self.model_names())
        return parse_model(path, read_toml(path))

    def model(self, name: str) -> ModelSpec:
        return self.model_entry(name).spec

    def model_entries(self) -> list[ModelEntry]:
        return [self.model_entry(n) for n in self.model_names()]

    # -- hardware -------------------------------------------------------------------------
    def defaults_entry(self) -> tuple[CalibrationDefaults, dict[str, Quantity]]:
        path = self._find(self.hwdb_dirs, "defaults.toml")
        if path is None:
            raise CatalogError(f"{self.hwdb_dir}: no defaults.toml along the hwdb search path")
        return parse_defaults(path, read_toml(path))

    def defaults(self) -> CalibrationDefaults:
        return self.defaults_entry()[0]

    def hw_names(self, kind: str | None = None) -> list[str]:
        kinds = HW_KINDS if kind is None else (kind,)
        return sorted({n for k in kinds for n in self._names(self.hwdb_dirs, k)})

    def _hw_path(self, name: str, kinds: tuple[str, ...], what: str) -> tuple[Path, str]:
        if NAME_RE.match(name):
            found = {k: p for k in HW_KINDS if (p := self._find(self.hwdb_dirs, f"{k}/{name}.toml")) is not None}
            if len(found) > 1:  # an FPGA 'rtx-4090' would shadow the GPU in every command that takes a device
                (kind_a, path_a), (kind_b, path_b) = list(found.items())[:2]
                raise CatalogError(f"hardware name '{name}' is taken twice: {path_a} ({kind_a}) and {path_b} "
                                   f"({kind_b}); a name belongs to one entry of one kind, rename one")
            for kind in kinds:
                if kind in found:
                    return found[kind], kind
        other = [k for k in HW_KINDS if k not in kinds and name in self.hw_names(k)]
        note = f"'{name}' is a {other[0]} entry" if other else ""
        raise UnknownNameError(what, name, sorted(n for k in kinds for n in self.hw_names(k)), note)

    def _hw_path_or_none(self, name: str) -> Path | None:
        return next((p for k in HW_KINDS if NAME_RE.match(name) and (p := self._find(self.hwdb_dirs, f"{k}/{name}.toml"))),
                    None)

    def hw_entry(self, name: str, kinds: tuple[str, ...] = HW_KINDS, what: str = "hardware entry") -> HwEntry:
        path, kind = self._hw_path(name, kinds, what)
        data = read_toml(path)
        if kind == "link":
            return parse_link(path, data, self.defaults())
        entry = parse_device(path, data, kind, self.defaults())
        for field in ("host_link", "peer_link"):
            link = getattr(entry.spec, field)
            if link is not None and (not NAME_RE.match(link) or self._find(self.hwdb_dirs, f"link/{link}.toml") is None):
                close = difflib.get_close_matches(link, self.hw_names("link"), n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise DataError(path, field, link, f"names no link entry; {hint}see 'dfvg-dse hw list --kind link'")
        return entry

    def device(self, name: str, tensor: int = 1, pipeline: int = 1, expert: int = 1,
               degrees_given: bool = False) -> DeviceSpec:
        """A device; a GPU priced by this catalog's engine profile (with_engine), if any. A group of
        GPUs (specs/parallel.py) by name (`4xh100-sxm`, `8xh100-sxm-pp2`, `4xh100-sxm-ep4`) or by its
        degrees (an expert degree alone implies the same tensor degree); `degrees_given`: the user
        set them, so a group name with them is refused even at 1."""
        group = parse_group_name(name) if self._hw_path_or_none(name) is None else None
        if group is not None:
            if degrees_given or (tensor, pipeline, expert) != (1, 1, 1):
                raise InputError(f"device {name} is already a group; give its unit ({group[0]}) with the degrees")
            name, tensor, pipeline, expert = group
        tensor = implied_tensor(tensor, expert)
        if (tensor, pipeline) != (1, 1):
            unit = self.device(name)
            link = self.link(unit.peer_link) if unit.peer_link else None
            try:
                return group_device(unit, tensor, pipeline, link, expert)
            except SpecError as err:
                raise InputError(f"{group_name(name, tensor, pipeline, expert)}: {err}") from None
        spec = self.hw_entry(name, ("fpga", "gpu", "cpu"), "device").spec
        if spec.own_engine:  # a calibrated device brings the profile fitted to its own forwards
            return dataclasses.replace(spec, engine=self.engine(spec.own_engine))
        if spec.kind == "gpu" and self.engine_name != ROOFLINE:
            return dataclasses.replace(spec, engine=self.engine(self.engine_name))
        return spec

    def colocated_draft_device(self, verify: DeviceSpec, tensor: int = 1, pipeline: int = 1,
                               expert: int = 1) -> DeviceSpec:
        """The draft at its own degrees on the verifier's GPUs (specs/parallel.py)."""
        unit = verify.parallel.unit.name if verify.parallel is not None else verify.name
        try:
            return colocated_draft_device(verify, self.device(unit, tensor, pipeline, expert))
        except SpecError as err:
            raise InputError(f"--draft-tp {tensor}: {err}") from None

    def link(self, name: str) -> LinkSpec:
        return self.hw_entry(name, ("link",), "link").spec

    def hw_entries(self, kind: str | None = None) -> list[HwEntry]:
        kinds = HW_KINDS if kind is None else (kind,)
        return [self.hw_entry(n, (k,)) for k in kinds for n in self.hw_names(k)]

    # -- engine profiles (docs/engines.md) -----------------------------------------------------
    def engine_names(self) -> list[str]:
        """Fitted engine profiles along the hwdb search path, and `roofline` (no profile)."""
        return [ROOFLINE] + self._names(self.hwdb_dirs, "engines")

    def engine_entry(self, name: str) -> tuple[EngineProfile, dict]:
        """A profile and its file's document (for `fitted`, `display_name`, the fact sources)."""
        path = self._find(self.hwdb_dirs, f"engines/{name}.toml") if NAME_RE.match(name) else None
        if path is None:
            raise UnknownNameError("engine", name, self.engine_names())
        data = read_toml(path)
        return parse_engine(path, data), data

    def engine(self, name: str) -> EngineProfile | None:
        """The profile of an engine; None for `roofline` (the plain roofline of the hwdb entries)."""
        return None if name == ROOFLINE else self.engine_entry(name)[0]

    def engine_support(self, engine: str, version: str | None = None) -> EngineSupport:
        """A checked release of a serving engine (hwdb/engine-support/ENGINE.toml): `version`, or the
        newest checked one."""
        path = self._find(self.hwdb_dirs, f"engine-support/{engine}.toml") if NAME_RE.match(engine) else None
        if path is None:
            raise UnknownNameError("serving engine", engine, self._names(self.hwdb_dirs, "engine-support"))
        releases = sorted(parse_engine_support(path, read_toml(path)), key=lambda r: version_key(r.version))
        if version is None:
            return releases[-1]
        found = [r for r in releases if r.version == version]
        if not found:
            raise InputError(f"--engine-version {shorten(version)}: {engine} release not checked "
                             f"({path}); checked: {', '.join(r.version for r in releases)}")
        return found[0]

    def with_engine(self, name: str) -> Catalog:
        """This catalog, with GPUs priced by an engine's profile (`roofline`: none)."""
        self.engine(name)  # an unknown name is refused here, once
        return dataclasses.replace(self, engine_name=name)

    # -- published measurements (docs/measurements.md) -------------------------------------
    def measurement_names(self) -> list[str]:
        return self._names(self.hwdb_dirs, "measurements")

    def measurements(self, kind: str | None = None) -> list[MeasurementSource]:
        """Every measurement file along the hwdb search path (an earlier folder overrides a file by its
        name), optionally of one kind ("forward", "speculative" or "serving"); names checked against the catalog."""
        known = self._known_names()
        sources = []
        for name in self.measurement_names():
            path = self._find(self.hwdb_dirs, f"measurements/{name}.toml")
            source = read_measurements(path, known)
            if kind is None or source.kind == kind:
                sources.append(source)
        return sources

    def check_measurements(self, path: Path, document: dict) -> MeasurementSource:
        """A measurement document as `measurements()` would read it from `path` (DataError if it would not)."""
        return parse_measurements(path, document, self._known_names())

    def _known_names(self) -> Callable[[str, str], str | None]:
        """For parse_measurements: None when a row's device, model or workload is in the catalog, else why not."""
        return name_check({"model": set(self.model_names()), "workload": set(workload_names(self.models_dirs)),
                           "device": set(self.hw_names("gpu")) | set(self.hw_names("cpu"))})

    # -- acceptance profiles and trees ----------------------------------------------------
    def _profile_paths(self) -> dict[str, Path]:
        """Profile name (its `name` field, e.g. 'qwen3-8b/qwen3-0.6b') -> file; first match wins."""
        found: dict[str, Path] = {}
        for directory in self.models_dirs:
            here: dict[str, Path] = {}  # a directory earlier on the search path overrides by name; one directory
            for path in sorted((directory / "pairs").glob("*.toml")):  # with two files of one name is an error
                if path.is_file() and NAME_RE.match(path.stem):
                    name = read_toml(path).get("name")
                    name = name if isinstance(name, str) else path.stem
                    if name in here:
                        raise CatalogError(f"acceptance profile name {shown(name)} is taken twice: {here[name]} and "
                                           f"{path}; a profile name belongs to one file, rename one")
                    here[name] = path
            for name, path in here.items():
                found.setdefault(name, path)
        return found

    def profile_names(self) -> list[str]:
        return sorted(self._profile_paths())

    def profile(self, name: str) -> AcceptanceProfile:
        paths = self._profile_paths()
        if name not in paths:
            raise UnknownNameError("acceptance profile", name, sorted(paths))
        return parse_profile(paths[name], read_toml(paths[name]))

    def pair_profile(self, target: str, draft: str, remedy: str = "") -> AcceptanceProfile:
        """The shipped (or your) profile of a target/draft pair, the default when no --acceptance is given;
        `remedy` says what to do when there is none (default: pass --acceptance)."""
        name = f"{target}/{draft}"
        if name not in self._profile_paths():
            raise CatalogError(f"no acceptance profile for {shorten(name)}; " + (remedy or (
                "pass --acceptance SPEC (0.8, a rank vector 0.63,0.11,0.06, pair:NAME from "
                "'dfvg-dse acceptance list', or a profile file)")))
        return self.profile(name)

    def profile_document(self, name: str) -> dict:
        """The profile file as written (metadata such as target, draft, workload, fit); `name` is a
        catalog profile or a profile file."""
        paths = self._profile_paths()
        if name not in paths and _is_file(Path(name)):
            return {**read_toml(Path(name)), "path": name}
        if name not in paths:
            raise UnknownNameError("acceptance profile", shorten(name), sorted(paths))
        return {**read_toml(paths[name]), "path": str(paths[name])}

    def acceptance(self, spec: str) -> AcceptanceProfile:
        """An acceptance SPEC: 0.8 (i.i.d. alpha), 0.63,0.11,0.06 (rank vector), pair:NAME, or a file."""
        if not isinstance(spec, str):  # a study file's value can be any TOML type
            raise InputError(f"acceptance {shown(spec)}: a SPEC is a string, e.g. \"0.8\" or \"pair:NAME\"")
        text = spec.strip()
        if text.startswith("pair:"):
            name = text[5:]
            if name not in self._profile_paths():
                raise UnknownNameError("acceptance profile", shorten(name), self.profile_names())
            return self.profile(name)
        path = spec_file(text, "acceptance")
        if path is not None:
            return parse_profile(path, read_toml(path))
        try:
            values = tuple(float(x) for x in text.split(","))
        except ValueError:
            raise InputError(f"acceptance {shown(text)}: expected a number (0.8), a rank vector (0.63,0.11,0.06), "
                             "pair:NAME (see 'dfvg-dse acceptance list') or a profile file") from None
        kind = "alpha" if len(values) == 1 else "rank vector"
        try:
            return AcceptanceProfile(f"{kind} {text}", values, source="command line")
        except SpecError as err:  # name the option: the field alone (rank_probs[0]) means nothing to the user
            where = f"value {int(err.field[11:-1]) + 1}" if err.field.startswith("rank_probs[") else "the sum"
            raise InputError(f"acceptance {shown(text)}: {where} = {shown(err.value)}: {err.allowed}") from None

    def workload(self, spec: str) -> Workload:
        """A workload by name (models/workloads/NAME.toml), or a TOML or CSV file (catalog/workloads.py)."""
        return read_workload(spec, spec_file(spec, "workload"), self.models_dirs)

    def tree_file(self, spec: str) -> Path | None:
        """The file a tree SPEC names: models/trees/NAME.toml for published:NAME, or the file itself;
        None for inline SPECs (see spec_file for which strings are files). Name it in errors about
        the tree it holds: `published:NAME` does not say which folder of the search path it came from."""
        if spec.startswith("published:"):
            name = spec.split(":", 1)[1]
            path = self._find(self.models_dirs, f"trees/{name}.toml") if NAME_RE.match(name) else None
            if path is None:
                raise UnknownNameError("published tree", shorten(name), self._names(self.models_dirs, "trees"))
            return path
        return spec_file(spec.strip(), "tree")

    def tree_document(self, spec: str) -> dict | None:
        """A tree given as a file or as published:NAME (models/trees/NAME.toml), its fields checked
        (read_tree_document); None for inline SPECs."""
        path = self.tree_file(spec)
        return None if path is None else read_tree_document(path)

    @staticmethod
    def read_checkpoint(folder: str | Path, role: str = "target"):
        """A Hugging Face checkpoint folder, or a shipped reference pair's `role` (target or draft):
        `builtin:tiny` (numpy-sized) or `builtin:small` (issue 19: sized for the torch backend):
        (config, ModelSpec, float32 tensors, folder)."""
        from dfvg_dse.catalog.checkpoints import read_checkpoint

        if str(folder).startswith("builtin:"):
            if str(folder) not in BUILTIN_PAIRS:
                raise CatalogError(f"{folder}: unknown built-in checkpoint; the shipped pairs are builtin:tiny "
                                   "(and its draft head builtin:tiny-eagle) and builtin:small")
            folder = shipped_data_dir("models") / "reference" / BUILTIN_PAIRS[str(folder)] / role
        return (*read_checkpoint(folder), Path(folder))

    @staticmethod
    def read_tokenizer(folder: str | Path):
        """A checkpoint folder's tokenizer.json (`tokenizers` package), or None when it has none."""
        from dfvg_dse.catalog.checkpoints import read_tokenizer

        return read_tokenizer(folder)

    @staticmethod
    def read_study(path: str | Path, choices: dict | None = None) -> dict:
        """A study file (TOML): [models], [hardware] and [space] tables (docs/search.md), checked key
        by key and typed (studies.check_study; `choices`: the allowed families and schedules)."""
        doc = check_study(path, read_toml(existing_file(path, "study")), choices)
        acceptance = doc.get("models", {}).get("acceptance")
        if isinstance(acceptance, str) and _names_a_file(acceptance) and not Path(acceptance).is_absolute():
            # a profile file named in a study is found next to the study, wherever the command runs
            doc = {**doc, "models": {**doc["models"], "acceptance": str(Path(path).parent / acceptance)}}
        return doc

    @staticmethod
    def read_trace(path: str | Path) -> list[tuple[int, dict]]:
        """A decoding trace (docs/trace-format.md): (line number, round object) pairs, every round
        checked (traces.check_trace_round; errors start with PATH:LINE:)."""
        return read_trace_file(existing_file(path, "trace"))

    @staticmethod
    def read_reference_prompts(path: str | Path | None = None, split: str | None = None) -> list[dict]:
        """Prompt set of the reference decoder (JSONL: id, split, source, text); the shipped one by default."""
        path = existing_file(path, "prompts") if path else shipped_data_dir("models") / "reference" / "prompts.jsonl"
        prompts = []
        for line, raw in read_jsonl(path):
            if not isinstance(raw.get("text"), str) or not raw["text"]:
                raise CatalogError(f"{path}:{line}: field 'text' must be a non-empty string")
            if split is None or raw.get("split") == split:
                prompts.append(raw)
        if not prompts:
            raise CatalogError(f"{path}: no prompt" + (f" with split '{split}'" if split else ""))
        return prompts

    def write_profile(self, path: str | Path, profile: AcceptanceProfile, meta: dict, force: bool = False) -> Path:
        """Write a profile file atomically (never over an existing file without force); it must read back."""
        target = Path(path)
        if target.exists() and not force:
            raise CatalogError(f"{target}: already exists; pass --force to replace it")
        write_toml_atomic(target, profile_document(profile, meta))
        parse_profile(target, read_toml(target))
        return target

    # -- import ---------------------------------------------------------------------------
    def import_model(self, config_path: str | Path, name: str, source: str | None = None,
                     tag: str = "unverified", out_dir: str | Path | None = None,
                     force: bool = False) -> tuple[Path, ModelSpec]:
        """Turn a Hugging Face config.json into models/NAME.toml (atomically); returns its path."""
        if not NAME_RE.match(name):
            raise CatalogError(f"--name {name!r}: use lower-case letters, digits, '.', '_' and '-'")
        config_path = Path(config_path)
        config = read_json(config_path)
        spec = model_spec_from_hf_config(config_path, config, name, name, source or path_text(config_path))
        target_dir = Path(out_dir) if out_dir is not None else self.import_dir
        target = target_dir / f"{name}.toml"
        if target.exists() and not force:
            raise CatalogError(f"{target}: already exists; pass --force to replace it")
        shadowed = self._find(self.models_dirs, f"{name}.toml")
        searched = [d.resolve() for d in self.models_dirs]
        if target_dir.resolve() not in searched and target_dir.resolve() == user_data_dir("models").resolve():
            searched.insert(len(searched) - 1, target_dir.resolve())  # made now, searched before the shipped data
        # a folder off the search path shadows nothing; one searched after the existing file neither
        shadows = (shadowed is not None and target_dir.resolve() in searched
                   and searched.index(target_dir.resolve()) <= searched.index(shadowed.parent.resolve()))
        if shadows and shadowed.resolve() != target.resolve() and not force:
            raise CatalogError(f"--name {name}: {shadowed} has this name, and your file would take its place in "
                               "every command; pick another name, or pass --force to shadow it")
        document = model_document(config, name, source or f"imported from {path_text(config_path.resolve())}", tag)
        write_toml_atomic(target, document)
        parse_model(target, read_toml(target))  # the file we wrote must read back
        return target, spec


def write_toml_documents(documents) -> None:
    """Write (path, document) pairs as TOML through temporary files and renames, all or none
    (files.atomic_write_all), so no half file and no half set is left."""
    import tomli_w  # only the import path writes TOML

    try:  # encoded inside the writer: text that is not valid Unicode becomes the same one-line error
        atomic_write_all([(path, lambda tmp, text=tomli_w.dumps(doc): tmp.write_bytes(text.encode("utf-8")))
                          for path, doc in documents])
    except InputError as err:  # cannot be made or written, or failed half-way: a catalog problem, one line
        raise CatalogError(str(err)) from None


def write_toml_atomic(path: Path, document: dict) -> None:
    """Write one TOML document (write_toml_documents)."""
    write_toml_documents([(path, document)])
