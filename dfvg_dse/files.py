"""Every file the tool writes goes through atomic_write: a temporary name in the target folder,
then a rename, so a reader never sees half a file and a failed run leaves no stray output.

Missing parent folders are created (one rule for every output option: -o, --plot, --out,
--results-dir); a place that cannot be written is one InputError line naming it. Files get the
user's umask, like any file open() creates, not mkstemp's private 0600."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from dfvg_dse.specs import InputError


def current_umask() -> int:
    """The process's umask (read by setting and restoring it: the only way the OS offers)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write) -> Path:
    """Call write(tmp_path) on a temporary file beside `path`, then rename it over `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    except OSError as err:
        raise InputError(f"{path}: cannot write there: {err.strerror or err}") from None
    os.close(handle)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except IsADirectoryError:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{path}: a folder is in the way of this file") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


PLOT_SUFFIXES = (".png", ".svg", ".pdf")  # what --plot options promise; matplotlib picks the format by suffix


def check_writable(path: Path, option: str) -> None:
    """Before any work: the nearest folder of `path` that exists must be a folder we may write in
    (the missing ones below it are made when the file is written)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{option} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: {parent} is not writable")


def check_plot_path(path: str | Path, option: str = "--plot") -> Path:
    """A plot path with a supported suffix in a place that can be written, checked before the work."""
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise InputError(f"{option} {path}: unsupported format {path.suffix or '(no suffix)'}; "
                         f"use {', '.join(PLOT_SUFFIXES)}")
    if path.is_dir():
        raise InputError(f"{option} {path}: a folder, not a file name")
    check_writable(path, option)
    return path


def write_plot(path: Path, draw) -> Path:
    """draw(tmp_path) renders a figure; the file appears under `path` only when complete."""
    return atomic_write(check_plot_path(path), draw)
