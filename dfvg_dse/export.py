"""The sole writer of results/: run folders, tables, plots' paths, recommended and engine configs.

A run lives in results/<run-id>/ (or --results-dir / DFVG_DSE_RESULTS_DIR). Every file is written
to a temporary name and renamed, so a reader never sees half a file; an existing run folder is
never reused without --force (or --resume, which continues it).
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import shutil
from pathlib import Path

import pandas as pd

from dfvg_dse.files import PLOT_SUFFIXES, atomic_write, check_plot_path, remove_temporaries, write_plot  # noqa: F401
from dfvg_dse.report.tables import json_safe
from dfvg_dse.specs import InputError, SpecError
from dfvg_dse.specs.objectives import COSTS, DEFAULT_COST, SPEED
from dfvg_dse.tree.shapes import from_parents

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def results_dir(option: str | None) -> Path:
    """--results-dir, else DFVG_DSE_RESULTS_DIR, else ./results."""
    return Path(option or os.environ.get("DFVG_DSE_RESULTS_DIR") or "results")


def run_dir(base: Path, run_id: str, force: bool = False, resume: bool = False) -> Path:
    """The folder of a run: created new, replaced with force, or reused with resume.

    --force sets the old run aside as `.<run-id>.replaced` until the new one has finished
    (drop_replaced), so a failed or killed rerun loses nothing; a later --force keeps whichever of
    the two is a finished run. Temporary files a killed writer left in the folder are removed."""
    if not RUN_ID.match(run_id):
        raise InputError(f"--run-id {run_id!r}: use letters, digits, '.', '_' and '-'")
    path = base / run_id
    if base.exists() and not base.is_dir():
        raise InputError(f"--results-dir {base}: not a folder")
    try:
        _drop_trash(base, run_id)
        if resume:
            if not path.is_dir():
                raise InputError(f"--resume: no run folder {path}")
            remove_temporaries(path)
            return path
        if path.exists():
            if not force:
                raise InputError(f"{path}: already exists; pass --force to replace it or --resume to continue it")
            aside = _aside(path)
            if aside.exists() and not is_finished(path):  # an unfinished rerun; `aside` is the last finished run
                _discard(path)
            else:  # the folder is a finished run (or nothing finished was set aside): keep it as the one aside
                _discard(aside)
                path.rename(aside)
        path.mkdir(parents=True)
    except OSError as err:
        raise InputError(f"--results-dir {base}: cannot create the run folder {path}: "
                         f"{err.strerror or err}") from None
    return path


def _aside(path: Path) -> Path:
    return path.parent / f".{path.name}.replaced"


def is_finished(path: Path) -> bool:
    """A run folder whose manifest says it finished (a summary is written only then)."""
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("status") != "running" and "summary" in manifest


def _discard(path: Path) -> None:
    """Remove a folder (or file) in two steps, a rename then the deletion, so a kill halfway never
    leaves a half-deleted run under a name that counts."""
    if not path.exists() and not path.is_symlink():
        return
    trash = path.parent / f"{path.name}.trash-{os.getpid()}"
    path.rename(trash)
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash)
    else:
        trash.unlink()


def _drop_trash(base: Path, run_id: str) -> None:
    """What an earlier discard of this run left when it was killed."""
    if base.is_dir():
        for trash in base.glob(f".{glob.escape(run_id)}.replaced.trash-*"):
            shutil.rmtree(trash, ignore_errors=True)
        for trash in base.glob(f"{glob.escape(run_id)}.trash-*"):
            shutil.rmtree(trash, ignore_errors=True)


def abandon_run(path: Path) -> None:
    """Undo a run folder whose writing failed: it goes, and the run --force set aside comes back."""
    try:
        _discard(path)
        if _aside(path).is_dir():
            _aside(path).rename(path)
    except OSError:  # the place that refused the run's files may refuse this too: the first error is the one shown
        pass


def drop_replaced(path: Path) -> None:
    """Delete the run that --force set aside, once its replacement is complete."""
    try:
        _discard(_aside(path))
        remove_temporaries(path)
    except OSError as err:
        raise InputError(f"{_aside(path)}: cannot remove the replaced run: {err.strerror or err}") from None


def latest_run(base: Path, kind: str = "search") -> str:
    """The most recently created run of a kind (by its manifest's creation time, not file times)."""
    runs = []
    for path in base.glob("*/manifest.json"):
        try:
            manifest = read_json_file(path)
        except InputError:  # a damaged folder is not a candidate
            continue
        if manifest.get("kind") == kind:
            runs.append((str(manifest.get("created", "")), path.parent.name))
    if not runs:
        raise InputError(f"{base}: no {kind} run to resume; pass --run-id")
    return max(runs)[1]


def write_json(path: Path, document) -> Path:
    """JSON with NaN written as null (a missing value), never as an invalid token."""
    text = json.dumps(json_safe(document), indent=2, allow_nan=False, default=_jsonable) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_text(path: Path, text: str) -> Path:
    """A text file (an engine's options file), written atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_jsonl(path: Path, records: list[dict]) -> Path:
    """One JSON object per line (traces), written atomically."""
    lines = [json.dumps(json_safe(r), allow_nan=False, default=_jsonable) for r in records]
    return atomic_write(path, lambda tmp: tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8"))


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def write_table(path: Path, frame: pd.DataFrame) -> list[Path]:
    """CSV always; Parquet beside it when pyarrow is installed."""
    written = [atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False, encoding="utf-8"))]
    if not Path(path).is_file():  # written into a device or pipe (-o /dev/stdout): no sibling file beside it
        return written
    try:
        import pyarrow  # noqa: F401  (optional: Parquet output)
    except ImportError:
        return written
    parquet = path.with_suffix(".parquet")
    written.append(atomic_write(parquet, lambda tmp: frame.to_parquet(tmp, index=False)))
    return written


def write_markdown_table(path: Path, records: list[dict], columns: list[tuple[str, str, str]], title: str) -> Path:
    """A Markdown table: columns are (key, header, format spec) over records of the same keys; a
    None value is shown as a dash."""
    lines = [f"# {title}", "", "| " + " | ".join(h for _, h, _ in columns) + " |",
             "|" + " --- |" * len(columns)]
    for record in records:
        lines.append("| " + " | ".join("–" if record[k] is None else format(record[k], f) if f else str(record[k])
                                       for k, _, f in columns) + " |")
    return atomic_write(path, lambda tmp: tmp.write_text("\n".join(lines) + "\n", encoding="utf-8"))


def write_records(path: Path, records: list[dict]) -> list[Path]:
    """A table of one row per record (same keys), as write_table writes it."""
    return write_table(path, pd.DataFrame(records))


MAX_RUN_FILE_BYTES = 256 * 2**20  # a run folder's JSON or CSV (2,000 trials make about 2 MB of CSV)
MANIFEST_TABLES = ("inputs", "request", "space", "summary")


def read_json_file(path: Path) -> dict:
    """A JSON object from a run folder, read as untrusted input: a regular file of bounded size,
    any depth of nesting refused in one line, an object at the top."""
    try:
        if not path.is_file():
            raise InputError(f"{path}: not a regular file")
        if path.stat().st_size > MAX_RUN_FILE_BYTES:
            raise InputError(f"{path}: larger than {MAX_RUN_FILE_BYTES // 2**20} MiB; not a file this tool wrote")
        data = json.loads(path.read_bytes().decode("utf-8"))
    except RecursionError:
        raise InputError(f"{path}: nested too deeply; not a file this tool wrote") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not valid UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON: {err.msg} (line {err.lineno})") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_manifest(path: Path) -> dict:
    """A run's manifest.json, its kind and tables checked."""
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise InputError(f"{path}: no manifest.json; not a run folder")
    manifest = read_json_file(manifest_path)
    if manifest.get("kind") not in ("search", "sweep"):
        raise InputError(f"{manifest_path}: kind = {str(manifest.get('kind'))[:40]!r}: allowed: search, sweep")
    for table in MANIFEST_TABLES:
        if table in manifest and not isinstance(manifest[table], dict):
            raise InputError(f"{manifest_path}: {table} must be an object")
    cost = manifest.get("space", {}).get("cost", DEFAULT_COST)
    if not isinstance(cost, str) or cost not in COSTS:
        raise InputError(f"{manifest_path}: space.cost = {str(cost)[:40]!r}: allowed: {', '.join(COSTS)}")
    return manifest


# what a design is expected to achieve, as recommended.json and exports carry it
EXPECTED_METRICS = ("tokens_per_s", "tokens_per_s_per_sequence", "j_per_token", "usd_per_mtoken", "speedup_vs_ar",
                    "energy_efficiency_vs_ar", "round_time_s", "expected_tokens_per_round", "draft_time_s",
                    "verify_time_s", "link_time_s",
                    # under load (search --rate): what users get at the offered rate
                    "goodput_tokens_per_s", "slo_attainment", "ttft_p90_s", "tpot_p90_s", "speculate_max_batch")


def expected_metrics(row) -> dict:
    """A trial row's EXPECTED_METRICS that it holds as numbers ($/Mtoken only where priced)."""
    out = {}
    for key in EXPECTED_METRICS:
        value = row.get(key) if hasattr(row, "get") else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = float(value)
    return out


def run_cost(manifest: dict) -> str:
    """The cost objective a run minimised (runs made before --objectives minimised energy)."""
    return manifest.get("space", {}).get("cost", DEFAULT_COST)


def row_tree(table: Path, row) -> tuple[list, list]:
    """The tree of a trials.csv row (its parents and ranks columns, JSON lists), checked."""
    try:
        parents, ranks = (json.loads(row[c]) if isinstance(row.get(c), str) else None for c in ("parents", "ranks"))
        if parents is None:
            return [-1], [0]
        tree = from_parents(parents, ranks)
    except (ValueError, TypeError, RecursionError, InputError, SpecError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(f"{table}: trial {row.get('trial')}: parents/ranks: {message}") from None
    return list(tree.parents), list(tree.ranks)


DESIGN_TEXT = ("target", "draft", "draft_device", "verify_device", "schedule", "family")


def read_recommended(path: Path) -> dict:
    """recommended.json: pick name -> design, each design's tree and fields checked, so an export
    never turns a damaged file into an engine config."""
    picks = read_json_file(path)
    for pick, design in picks.items():
        where = f"{path}: {pick}"
        if not isinstance(design, dict):
            raise InputError(f"{where}: must be an object (a design)")
        for key in DESIGN_TEXT:
            if not isinstance(design.get(key), str):
                raise InputError(f"{where}.{key}: must be a string, got {str(design.get(key))[:40]!r}")
        for key in ("batch", "depth"):
            value = design.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "batch" else 0):
                raise InputError(f"{where}.{key}: must be a whole number >= {1 if key == 'batch' else 0}, "
                                 f"got {str(value)[:40]!r}")
        parents, ranks = design.get("parents"), design.get("ranks")
        if not isinstance(parents, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parents):
            raise InputError(f"{where}.parents: must be a list of whole numbers, got {str(parents)[:40]!r}")
        try:
            from_parents(parents, ranks)
        except (InputError, SpecError) as err:
            raise InputError(f"{where}: {err}") from None
        expected = design.get("expected", {})
        if not isinstance(expected, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                     and math.isfinite(v) for v in expected.values()):
            raise InputError(f"{where}.expected: must map metric names to finite numbers")
    return picks


def read_run(path: Path, sweeps: bool = False, command: str = "export") -> tuple[dict, pd.DataFrame]:
    """A finished run's manifest and trial table (for `pareto` and `export`). With `sweeps`, a sweep
    run is read too: its grid.csv when it was saved, else its exact front (pareto.csv)."""
    manifest = read_manifest(path)
    if manifest.get("kind") == "sweep":
        if not sweeps:
            raise InputError(f"{path}: a sweep run; {command} reads search runs, whose trials record each design's "
                             "tree (run 'dfvg-dse search', or 'dfvg-dse estimate' for one design of the front)")
        table = path / "grid.csv" if (path / "grid.csv").is_file() else path / "pareto.csv"
    else:
        table = path / "trials.csv"
    if manifest.get("status") == "running" or not table.is_file():
        raise InputError(f"{path}: not a finished run (still running, or stopped: finish it with --resume)")
    if table.stat().st_size > MAX_RUN_FILE_BYTES:
        raise InputError(f"{table}: larger than {MAX_RUN_FILE_BYTES // 2**20} MiB; not a file this tool wrote")
    try:
        frame = pd.read_csv(table)
    except (OSError, ValueError, RecursionError) as err:
        raise InputError(f"{table}: cannot read: {str(err).splitlines()[0] if str(err) else type(err).__name__}") \
            from None
    objectives = (SPEED, run_cost(manifest))
    needed = {*objectives, "feasible", "draft_device", "verify_device", "schedule"}
    if manifest.get("kind") != "sweep":
        needed.add("trial")
    if not needed <= set(frame.columns):
        raise InputError(f"{table}: missing columns {', '.join(sorted(needed - set(frame.columns)))}")
    _check_table(table, frame, objectives)
    return manifest, frame


def _check_table(table: Path, frame: pd.DataFrame, objectives: tuple[str, str]) -> None:
    """The columns pareto and export compute with: typed, and finite where a design is feasible."""
    if frame["feasible"].dtype != bool:
        raise InputError(f"{table}: column feasible must hold True or False in every row")
    for column in objectives:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            raise InputError(f"{table}: column {column} must hold numbers in every row")
        bad = frame.index[frame["feasible"] & ~frame[column].map(math.isfinite)]
        if len(bad):
            raise InputError(f"{table}: row {int(bad[0]) + 2}: {column} = {float(frame[column][bad[0]])} in a feasible "
                             "design; must be a finite number")
    if "trial" in frame and (not pd.api.types.is_integer_dtype(frame["trial"]) or frame["trial"].duplicated().any()):
        raise InputError(f"{table}: column trial must hold distinct whole numbers")
    for column in ("draft_device", "verify_device", "schedule"):
        if frame[column].map(lambda v: not isinstance(v, str)).any():
            raise InputError(f"{table}: column {column} must name something in every row")
