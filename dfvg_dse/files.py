"""Every file the tool writes goes through atomic_write: a temporary name in the target folder,
then a rename, so a reader never sees half a file and a failed run leaves no stray output.

Missing parent folders are created (one rule for every output option: -o, --plot, --out,
--results-dir); a place that cannot be written, or a write that fails half-way (a full disk, a
failed rename, a plot backend error), is one InputError line naming the file the user asked for,
never the temporary one, and the temporary file is gone. Files get the user's umask, like any file
open() creates, not mkstemp's private 0600. A symbolic link is followed (the file it points to is
replaced, the link stays); a device or pipe (/dev/stdout, /dev/null) is written in place, since it
cannot be renamed over and must not be replaced by a plain file."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
import time
from pathlib import Path

from dfvg_dse.specs import InputError


def path_text(path: str | Path) -> str:
    """A path as text that can be written into a UTF-8 file: bytes that are not UTF-8 (a file name
    from another encoding) become U+FFFD, as click shows them."""
    return os.fsencode(path).decode("utf-8", "replace")


def current_umask() -> int:
    """The process's umask (read by setting and restoring it: the only way the OS offers)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _cannot_write(path: Path, err: Exception) -> InputError:
    reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err) or type(err).__name__
    return InputError(f"{path}: cannot write there: {reason}")


def atomic_write(path: Path, write) -> Path:
    """Call write(tmp_path) on a temporary file beside `path`, then rename it over `path`.

    write() may fail with an OSError (a full disk, a file size limit) or, for text, a
    UnicodeEncodeError: either becomes one InputError naming `path`, with nothing left behind."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode  # follows a link: what the name finally reaches
    except OSError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise InputError(f"{path}: a folder is in the way of this file")
    if mode is not None and not stat.S_ISREG(mode):  # a device or a pipe: no rename can be atomic there
        try:
            write(path)
        except (OSError, UnicodeEncodeError) as err:
            raise _cannot_write(path, err) from None
        return path
    tmp, final = _staged(path, write)
    try:
        os.replace(tmp, final)
    except IsADirectoryError:  # a folder appeared under the name while we wrote
        _remove(tmp)
        raise InputError(f"{path}: a folder is in the way of this file") from None
    except OSError as err:
        _remove(tmp)
        raise _cannot_write(path, err) from None
    except BaseException:  # Ctrl-C: no stray temporary
        _remove(tmp)
        raise
    return path


def atomic_write_all(items) -> list[Path]:
    """Write several plain files all or none: each write(tmp_path) of `items` ((path, write) pairs) to a
    temporary file beside its path first, and only when every one succeeded the renames, one after
    another. A folder in the way, a place that cannot be written or a write that fails is one
    InputError naming that file, with no temporary left and no file of the set replaced. One file is
    atomic_write's (a device or a pipe written in place)."""
    items = list(items)
    if len(items) == 1:
        return [atomic_write(*items[0])]
    staged: list[tuple[str, Path]] = []
    try:
        for path, write in items:
            if Path(path).is_dir():
                raise InputError(f"{path}: a folder is in the way of this file")
            staged.append(_staged(Path(path), write))
    except BaseException:
        for tmp, _ in staged:
            _remove(tmp)
        raise
    for tmp, final in staged:
        os.replace(tmp, final)
    return [final for _, final in staged]


def _staged(path: Path, write) -> tuple[str, Path]:
    """write(tmp) done on a temporary file beside `path` (a link's target), with the user's umask:
    (the temporary, the file it is to replace). A failure is one InputError naming `path`, with
    nothing left behind."""
    final = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.{os.getpid()}.",
                                       suffix=final.suffix)
    except OSError as err:
        raise _cannot_write(path, err) from None
    os.close(handle)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~current_umask())
    except (OSError, UnicodeEncodeError) as err:
        _remove(tmp)
        raise _cannot_write(path, err) from None
    except BaseException:  # Ctrl-C, or a bug in the writer: no stray temporary either way
        _remove(tmp)
        raise
    return tmp, final


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):  # the folder may have become unwritable too; the first error is the one to show
        os.unlink(tmp)


PLOT_SUFFIXES = (".png", ".svg", ".pdf")  # what --plot options promise; matplotlib picks the format by suffix


def check_writable(path: Path, option: str) -> None:
    """Before any work: the nearest folder of `path` that exists must be a folder we may write in
    (the missing ones below it are made when the file is written)."""
    _check_folder(path.parent, f"{option} {path}")


def _check_folder(folder: Path, label: str) -> None:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(f"{label}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):  # root passes it anyway: the write itself says why it failed
        raise InputError(f"{label}: {folder} is not writable")


def check_output_path(path: str | Path, option: str) -> Path:
    """A file the command writes after its work (-o, --trace): checked before the work, so a
    minute of decoding is not lost to a name that cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option} {path}: a folder, not a file name")
    check_writable(path, option)
    return path


def check_output_folder(path: str | Path, option: str) -> Path:
    """A folder the command fills after its work (--out), checked the same way before it."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path}: not a folder")
    _check_folder(path, f"{option} {path}")
    return path


def _check_plot_suffix(path: Path, label: str) -> None:
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise InputError(f"{label}: unsupported format {path.suffix or '(no suffix)'}; use {', '.join(PLOT_SUFFIXES)}")


def check_plot_path(path: str | Path, option: str = "--plot") -> Path:
    """A plot path with a supported suffix in a place that can be written, checked before the work."""
    path = Path(path)
    _check_plot_suffix(path, f"{option} {path}")
    return check_output_path(path, option)


def write_plot(path: Path, draw) -> Path:
    """draw(tmp_path) renders a figure; the file appears under `path` only when complete. A failure
    names `path` alone: it is an option's value (checked before the work) or a file of a run folder."""
    path = Path(path)
    _check_plot_suffix(path, str(path))
    return atomic_write(path, draw)


# atomic_write's temporary names: .NAME.PID.XXXXXXXX.SUFFIX (the writer's process id, mkstemp's letters)
TEMPORARY = re.compile(r"^\..+\.(\d+)\.[a-z0-9_]{8}(\.[A-Za-z0-9]+)?$")
ORPHAN_AGE_S = 24 * 3600.0  # a temporary this old is an orphan even if its process id is in use again


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def remove_temporaries(folder: Path) -> list[Path]:
    """Delete the temporary files that writers killed mid-write left in `folder` (their process is
    gone, or they are a day old); those of a live writer, and every finished file, are kept."""
    removed = []
    for item in Path(folder).iterdir():
        match = TEMPORARY.match(item.name)
        if not match or not item.is_file() or item.is_symlink():
            continue
        pid = int(match.group(1))
        if pid != os.getpid() and _alive(pid) and time.time() - item.stat().st_mtime < ORPHAN_AGE_S:
            continue
        with contextlib.suppress(FileNotFoundError):
            item.unlink()
            removed.append(item)
    return removed
