import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


SMALL_STUDY = """
[models]
target = "qwen3-8b"
draft = "qwen3-0.6b"
[hardware]
verify_devices = ["rtx-4090"]
draft_devices = ["v80", "rtx-4090"]
[space]
families = ["chain", "seq", "optimal"]
widths = [1, 2, 4]
depths = [2, 4, 6]
budgets = [8, 16]
batches = [1, 2]
fpga_pe_fractions = [0.5, 1.0]
fpga_clocks_mhz = [300.0]
"""


@pytest.fixture
def small_study(tmp_path) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(SMALL_STUDY)
    return path


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory):
    """A throwaway PostgreSQL server on a free local port (.ci/run installs PostgreSQL)."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL server binaries not installed (.ci/run installs them)")
    base = Path(tempfile.mkdtemp(prefix="dfvg-dse-pg-"))  # not under pytest's 0700 folders: postgres must enter
    data = base / "data"
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        runuser = shutil.which("runuser") or ("/usr/sbin/runuser" if Path("/usr/sbin/runuser").exists() else None)
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            runuser = None
        if runuser is None:
            pytest.skip("running as root without runuser or a postgres user to start PostgreSQL as")
        os.chmod(base, 0o777)
        as_user = [runuser, "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(as_user + [initdb, "-D", str(data), "-A", "trust", "-U", "postgres"], check=True,
                   capture_output=True)
    subprocess.run(as_user + [pg_ctl, "-D", str(data), "-l", str(base / "log"), "-w", "-o",
                              f"-p {port} -k {base} -h 127.0.0.1", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(as_user + [pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
