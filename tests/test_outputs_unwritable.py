"""Every output of the CLI on a place that cannot be written, or with a write that fails half-way
(a full disk, a failed rename, a plot backend error): exit 2, one line naming the file, no
traceback, and nothing half-written or temporary left behind (dfvg_dse/files.py, atomic_write).

The tests may run as root, whom chmod does not stop; a read-only folder is then also enforced by
patching the few os calls that create files and folders, for paths inside it only."""

from __future__ import annotations

import builtins
import errno
import io
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli_checks import one_line_error
from dfvg_dse.cli import cli
from dfvg_dse.files import atomic_write
from dfvg_dse.specs import InputError

CONFIG = Path(__file__).parent / "catalog" / "config_qwen2_tiny.json"
STUDY = """
[models]
target = "qwen3-8b"
draft = "qwen3-0.6b"
[hardware]
verify_devices = ["rtx-4090"]
draft_devices = ["v80", "rtx-4090"]
[space]
families = ["chain", "seq"]
widths = [1, 2]
depths = [2, 4]
budgets = [8]
batches = [1]
fpga_pe_fractions = [1.0]
fpga_clocks_mhz = [300.0]
"""
ERROR = re.compile(r"^Error: (?P<path>\S+): cannot write there: (?P<reason>.+)$")


def _invoke(*args) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    """A finished search run, its study file, a decoding trace: what the commands below read."""
    folder = tmp_path_factory.mktemp("inputs")
    study = folder / "study.toml"
    study.write_text(STUDY)
    result = _invoke("search", "--study", study, "--trials", "8", "--results-dir", folder, "--run-id", "r")
    assert result.exit_code == 0, result.stderr
    trace = folder / "trace.jsonl"
    result = _invoke("reference", "generate", "--prompt", "def f(", "--max-new-tokens", "24", "--trace", trace)
    assert result.exit_code == 0, result.stderr
    return {"run": folder / "r", "study": study, "trace": trace}


# command -> (its arguments, given the output folder `out` and the inputs; the file it writes, relative
# to `out`, or None for a run folder whose first file may be any of its files)
COMMANDS = {
    "export": (lambda out, i: ["export", i["run"], "-o", out / "config.json"], "config.json"),
    "export-into-run": (lambda out, i: ["export", out / "run", "--pick", "knee"], "run/export-knee.json"),
    "pareto": (lambda out, i: ["pareto", out / "run"], "run/pareto.png"),
    "sweep": (lambda out, i: ["sweep", "--study", i["study"], "--results-dir", out / "runs", "--run-id", "s"], None),
    "search": (lambda out, i: ["search", "--study", i["study"], "--trials", "4", "--results-dir", out / "runs",
                               "--run-id", "s"], None),
    "compare": (lambda out, i: ["compare", "--target", "qwen3-8b", "--draft", "qwen3-0.6b", "--plot",
                                out / "bars.png"], "bars.png"),
    "sensitivity": (lambda out, i: ["sensitivity", "--vary", "batch", "--values", "1,2", "--rounds", "200",
                                    "--plot", out / "lines.svg"], "lines.svg"),
    "generate-trace": (lambda out, i: ["reference", "generate", "--prompt", "ab", "--max-new-tokens", "4",
                                       "--trace", out / "t.jsonl"], "t.jsonl"),
    "bench": (lambda out, i: ["reference", "bench", "--count", "1", "--repeats", "1", "--max-new-tokens", "2",
                              "--trees", "chain:2", "--schedules", "sequential", "-o", out / "bench.csv"], "bench.csv"),
    "acceptance-fit": (lambda out, i: ["acceptance", "fit", i["trace"], "-o", out / "fit.toml", "--bootstrap", "10"],
                       "fit.toml"),
    "models-import": (lambda out, i: ["models", "import", CONFIG, "--name", "tiny-x", "--out-dir", out / "models"],
                      "models/tiny-x.toml"),
}
PLOTTING = ["pareto", "sweep", "search", "compare", "sensitivity"]


def _inside(path, folder: Path) -> bool:
    if isinstance(path, int):
        return False
    return Path(os.path.abspath(os.fspath(path))).is_relative_to(folder)


def _writes(mode: str) -> bool:
    return any(c in mode for c in "wax+")


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def out(tmp_path, inputs) -> Path:
    """The output folder, holding a copy of the finished run (pareto and export write into it)."""
    folder = tmp_path / "out"
    folder.mkdir()
    shutil.copytree(inputs["run"], folder / "run")
    return folder


def _read_only(folder: Path, monkeypatch) -> None:
    """chmod 555 on the folder and everything in it, and the same enforced for root."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():
            path.chmod(0o555)
    denied = lambda path: PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
    real_open, real_mkdir, real_access, real_builtin_open = os.open, os.mkdir, os.access, builtins.open

    def os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and _inside(path, folder):
            raise denied(path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def mkdir(path, mode=0o777, *, dir_fd=None):
        if _inside(path, folder):
            raise denied(path)
        return real_mkdir(path, mode, dir_fd=dir_fd)

    def access(path, mode, **kwargs):
        return False if mode & os.W_OK and _inside(path, folder) else real_access(path, mode, **kwargs)

    def open_(file, mode="r", *args, **kwargs):
        if _writes(mode) and _inside(file, folder):
            raise denied(file)
        return real_builtin_open(file, mode, *args, **kwargs)

    for name, fake in (("open", os_open), ("mkdir", mkdir), ("access", access)):
        monkeypatch.setattr(os, name, fake)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)


class _DiskFull:
    """A file whose first write lands half its data, then fails as a full disk does."""

    def __init__(self, handle):
        self._handle = handle

    def write(self, data):
        if not data:  # a probe of the file's mode (matplotlib writes b'' to find text files)
            return self._handle.write(data)
        self._handle.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()

    def __iter__(self):
        return iter(self._handle)

    def __getattr__(self, name):
        return getattr(self._handle, name)


def _disk_full(folder: Path, monkeypatch) -> None:
    real_open = builtins.open

    def open_(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        return _DiskFull(handle) if _writes(mode) and _inside(file, folder) else handle

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)


def _rename_fails(folder: Path, monkeypatch) -> None:
    real_replace = os.replace

    def replace(src, dst, **kwargs):
        if _inside(dst, folder):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(src), os.fspath(dst))
        return real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


def _backend_fails(folder: Path, monkeypatch) -> None:
    from matplotlib.figure import Figure

    def savefig(self, fname, **kwargs):
        Path(fname).write_bytes(b"\x89PNG\r\n half an image")
        raise ValueError("Image size of 90000x60000 pixels is too large. It must be less than 2^16 in each direction.")

    monkeypatch.setattr(Figure, "savefig", savefig)


def _check_nothing_left(out: Path, before: dict[str, bytes], output: str | None) -> None:
    """No temporary file, every existing file as it was, and the failed output not there. (A run that
    stops half-way keeps the files it completed before: what happens to its folder is the run
    machinery's business, not the writer's.)"""
    after = _snapshot(out)
    assert not [p for p in out.rglob(".*")], "a temporary file was left"
    assert {k: v for k, v in after.items() if k in before} == before, "an existing file changed"
    if output is not None:
        assert set(after) - set(before) == set(), sorted(set(after) - set(before))


def _check_error(result, out: Path, output: str | None, reason: str) -> None:
    line = one_line_error(result, reason, max_chars=400)
    found = ERROR.match(line)
    assert found, line
    named = Path(found["path"])
    if output is not None:
        assert named == out / output, line
    else:  # a run's file, named as the user will look for it, never the temporary one
        assert named.is_relative_to(out / "runs" / "s") and not named.name.startswith("."), line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_folder_is_one_line(command, out, inputs, monkeypatch):
    args, output = COMMANDS[command]
    before = _snapshot(out)
    try:
        _read_only(out, monkeypatch)
        result = _invoke(*args(out, inputs))
        monkeypatch.undo()
    finally:
        for path in [out, *out.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
    line = one_line_error(result, str(out), max_chars=400)
    assert "Permission denied" in line or "not writable" in line, line
    _check_nothing_left(out, before, output)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_mid_write_is_one_line(command, out, inputs, monkeypatch):
    args, output = COMMANDS[command]
    before = _snapshot(out)
    _disk_full(out, monkeypatch)
    result = _invoke(*args(out, inputs))
    monkeypatch.undo()
    _check_error(result, out, output, "No space left on device")
    _check_nothing_left(out, before, output)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_failed_rename_is_one_line_naming_the_file_not_its_temporary(command, out, inputs, monkeypatch):
    args, output = COMMANDS[command]
    before = _snapshot(out)
    _rename_fails(out, monkeypatch)
    result = _invoke(*args(out, inputs))
    monkeypatch.undo()
    _check_error(result, out, output, "Permission denied")
    _check_nothing_left(out, before, output)


@pytest.mark.parametrize("command", PLOTTING)
def test_a_plot_backend_error_is_one_line(command, out, inputs, monkeypatch):
    args, output = COMMANDS[command]
    before = _snapshot(out)
    _backend_fails(out, monkeypatch)
    result = _invoke(*args(out, inputs))
    monkeypatch.undo()
    _check_error(result, out, output, "the plot backend failed: Image size of 90000x60000 pixels is too large")
    _check_nothing_left(out, before, output)


@pytest.mark.parametrize("command, work", [
    (["calibrate", "--quick"], "dfvg_dse.cli.validation._calibrate"),
    (["validate", "--quick"], "dfvg_dse.cli.validation._calibrate"),
    (["reference", "bench", "--count", "1", "--repeats", "1"], "dfvg_dse.cli.reference.TwoStageRuntime"),
])
def test_long_commands_refuse_an_unwritable_output_before_their_work(command, work, tmp_path, monkeypatch):
    """calibrate and validate decode for a minute, bench for half a minute: not to fail afterwards."""
    folder = tmp_path / "locked"
    folder.mkdir()
    target = folder / ("bench.csv" if "bench" in command else "out")
    monkeypatch.setattr(work, lambda *a, **k: pytest.fail("the work started before the output was checked"))
    try:
        _read_only(folder, monkeypatch)
        result = _invoke(*command, "-o" if "bench" in command else "--out", target)
        monkeypatch.undo()
    finally:
        folder.chmod(0o755)
    one_line_error(result, str(target), "is not writable")
    assert list(folder.iterdir()) == []


def test_a_symbolic_link_is_followed_not_replaced(tmp_path, inputs):
    real = tmp_path / "configs" / "knee.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    result = _invoke("export", inputs["run"], "--pick", "knee", "-o", link)
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink() and '"format": "dfvg-dse"' in real.read_text()
    assert [p.name for p in real.parent.iterdir()] == ["knee.json"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_pipe_or_device_is_written_in_place_never_replaced(tmp_path):
    """`--trace /dev/stdout` must stream into the pipe; renaming a file over it (as root, over
    /dev/stdout or /dev/null) would replace the device for every program on the machine."""
    pipe = tmp_path / "trace.pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the writer's open does not wait
    try:
        result = _invoke("reference", "generate", "--prompt", "ab", "--max-new-tokens", "4", "--trace", pipe)
        assert result.exit_code == 0, result.stderr
        assert pipe.is_fifo()
        assert b'"round"' in os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert [p.name for p in tmp_path.iterdir()] == ["trace.pipe"]


def test_the_writer_turns_every_failure_into_one_error_naming_the_file(tmp_path):
    target = tmp_path / "notes.md"
    with pytest.raises(InputError, match=rf"^{re.escape(str(target))}: cannot write there: .*surrogates not allowed"):
        atomic_write(target, lambda tmp: tmp.write_text("bad \udc80 text", encoding="utf-8"))
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C half-way: re-raised, and no temporary either
        atomic_write(target, lambda tmp: (tmp.write_text("half"), (_ for _ in ()).throw(KeyboardInterrupt)))
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "folder.md").mkdir()
    with pytest.raises(InputError, match="a folder is in the way"):
        atomic_write(tmp_path / "folder.md", lambda tmp: tmp.write_text("x"))
    assert [p.name for p in tmp_path.iterdir()] == ["folder.md"]
