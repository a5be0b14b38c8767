"""Runs that stay consistent (issue 13): a shared study keeps its count, --resume picks the right
run, a run being rewritten says so, --force after a killed --force, Ctrl-C with workers, stray
temporary files, a study that cannot be written."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest

from dfvg_dse import export
from dfvg_dse.search import completed, run_search
from dfvg_dse.processes import HOLDS_SIGNALS, ignore_interrupts, spawning_quietly
from dfvg_dse.search.studies import storage
from dfvg_dse.specs import InputError
from studyfile import states as _states  # tests/search/studyfile.py

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _search(*args: str) -> list[str]:
    return [sys.executable, "-m", "dfvg_dse", "search", "--method", "optuna", *args]


def _wait_for_trials(db: Path, count: int, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline and process.poll() is None:
        if _states(db).get("COMPLETE", 0) >= count:
            return
        time.sleep(0.1)
    listing = sorted(str(p.relative_to(db.parent.parent)) for p in db.parent.parent.rglob("*"))
    raise AssertionError(f"{db}: fewer than {count} trials (process ended: {process.poll()}); {listing}")


def _three_processes(first: list[str], joining: list[list[str]], db: Path | None) -> list[subprocess.CompletedProcess]:
    """One process creates the study; two join it once it holds trials (each computes what is left)."""
    a = subprocess.Popen(first, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if db is not None:
        _wait_for_trials(db, 5, a)
    else:
        time.sleep(4)
    others = [subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for command in joining]
    results = []
    for p in [a, *others]:
        out, err = p.communicate(timeout=600)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


@pytest.mark.slow
def test_three_processes_on_one_run_study_stop_at_the_target(tmp_path, small_study):
    common = ["--study", str(small_study), "--trials", "150", "--results-dir", str(tmp_path), "--run-id", "s",
              "--json"]
    results = _three_processes(_search(*common), [_search(*common, "--resume")] * 2, tmp_path / "s" / "study.journal")
    for r in results:
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout)["trials"] == 150
    assert _states(tmp_path / "s" / "study.journal")["COMPLETE"] == 150  # was 3 x what each saw left


@pytest.mark.slow
def test_three_processes_on_one_postgresql_study_stop_at_the_target(tmp_path, small_study, postgres_url):
    common = ["--study", str(small_study), "--trials", "120", "--storage", postgres_url, "--run-id", "pg-three",
              "--json"]
    first = _search(*common, "--results-dir", str(tmp_path / "a"))
    joining = [_search(*common, "--resume", "--results-dir", str(tmp_path / m)) for m in "bc"]  # two machines
    for r in _three_processes(first, joining, None):
        assert r.returncode == 0, r.stderr[-2000:]
    study = optuna.load_study(study_name="pg-three", storage=postgres_url)
    assert completed(study) == 120


@pytest.mark.slow
@pytest.mark.parametrize("url", ["sqlite:///{}/w.db", "journal:{}/w.journal"], ids=["sqlite", "journal"])
def test_local_workers_share_the_count(small_space, tmp_path, url):
    url = url.format(tmp_path)
    study = run_search(small_space, url, "w", 90, seed=0, n_workers=3)
    assert completed(study) == 90
    again = run_search(small_space, url, "w", 100, seed=0, resume=True, n_workers=2)
    assert completed(again) == 100


def test_a_torn_journal_line_is_cut_before_a_resume(small_space, tmp_path):
    """A kill -9 in the middle of an append leaves half a line; optuna would refuse the journal once
    another line follows, so opening it cuts the torn line (a trial that never completed)."""
    url = f"journal:{tmp_path / 't.journal'}"
    study = run_search(small_space, url, "t", 20, seed=0)
    kept = {(json.dumps(t.params, sort_keys=True), t.values[0]) for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}
    journal = tmp_path / "t.journal"
    with journal.open("ab") as f:
        f.write(b'{"op_code":4,"worker_id":"killed","study_id":0,"datetime_start":"2026-')  # torn mid-append
    again = run_search(small_space, url, "t", 30, seed=0, resume=True)
    assert completed(again) == 30 and journal.read_bytes().endswith(b"\n")
    after = {(json.dumps(t.params, sort_keys=True), t.values[0]) for t in again.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}
    assert kept <= after  # nothing completed was lost


def _kill_when(process: subprocess.Popen, db: Path, count: int) -> None:
    _wait_for_trials(db, count, process)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


@pytest.mark.slow
def test_resume_without_run_id_takes_the_run_started_last(run, tmp_path, small_study):
    assert run("search", "--method", "optuna", "--study", str(small_study), "--trials", "20", "--results-dir", str(tmp_path),
               "--run-id", "a", "--json").exit_code == 0
    b = subprocess.Popen(_search("--study", str(small_study), "--trials", "5000", "--results-dir", str(tmp_path),
                                 "--run-id", "b", "--json"), env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    _kill_when(b, tmp_path / "b" / "study.journal", 10)
    resumed = run("search", "--method", "optuna", "--resume", "--trials", "30", "--results-dir", str(tmp_path), "--json")
    assert resumed.exit_code == 0, resumed.stderr
    assert Path(json.loads(resumed.stdout)["run_dir"]).name == "b"  # not the finished run a
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["summary"]["trials"] == 20


def test_a_run_being_rewritten_is_marked_until_every_file_agrees(run, tmp_path, small_study, monkeypatch):
    args = ["search", "--method", "optuna", "--study", str(small_study), "--results-dir", str(tmp_path), "--run-id", "x", "--json"]
    assert run(*args, "--trials", "20").exit_code == 0
    finished = json.loads((tmp_path / "x" / "manifest.json").read_text())

    def killed(*_args, **_kwargs):  # the process dies while the run's files are rewritten
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "write_plot", killed)
    assert run(*args, "--trials", "40", "--resume").exit_code == 130
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert manifest["status"] == "running" and manifest["created"] == finished["created"]
    for command in (["export", str(tmp_path / "x")], ["pareto", str(tmp_path / "x")]):
        refused = run(*command)
        assert refused.exit_code == 2 and "not a finished run" in refused.stderr
    monkeypatch.undo()
    done = run(*args, "--trials", "40", "--resume")
    assert done.exit_code == 0 and json.loads(done.stdout)["trials"] == 40
    assert export.is_finished(tmp_path / "x")


def _finished_manifest(path: Path, marker: str) -> None:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"kind": "search", "status": "finished", "summary": {},
                                                    "marker": marker}))


def test_force_after_a_killed_force_keeps_the_last_finished_run(tmp_path):
    _finished_manifest(tmp_path / ".r.replaced", "old")  # set aside by the killed --force
    (tmp_path / "r").mkdir()  # what the killed --force had begun
    (tmp_path / "r" / "manifest.json").write_text(json.dumps({"kind": "search", "status": "running"}))
    path = export.run_dir(tmp_path, "r", force=True)
    assert path.is_dir() and not any(path.iterdir())
    assert json.loads((tmp_path / ".r.replaced" / "manifest.json").read_text())["marker"] == "old"


def test_force_after_a_killed_cleanup_keeps_the_finished_run(tmp_path):
    _finished_manifest(tmp_path / "r", "new")  # finished; the deletion of the old one was killed halfway
    (tmp_path / ".r.replaced").mkdir()
    (tmp_path / ".r.replaced" / "trials.csv").write_text("half deleted\n")
    export.run_dir(tmp_path, "r", force=True)
    assert json.loads((tmp_path / ".r.replaced" / "manifest.json").read_text())["marker"] == "new"


@pytest.mark.slow
def test_force_after_a_killed_force_through_the_cli(run, tmp_path, small_study):
    results = tmp_path / "results"
    args = ["--study", str(small_study), "--results-dir", str(results), "--run-id", "f", "--json"]
    assert run("search", *args, "--trials", "20").exit_code == 0
    for _ in range(2):
        p = subprocess.Popen(_search(*args, "--trials", "5000", "--force"), env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        _kill_when(p, results / "f" / "study.journal", 5)
    again = run("search", *args, "--trials", "20", "--force")
    assert again.exit_code == 0, again.stderr
    assert sorted(p.name for p in results.iterdir()) == ["f"]


def test_resume_removes_temporary_files_a_kill_left(run, tmp_path, small_study):
    args = ["search", "--method", "optuna", "--study", str(small_study), "--results-dir", str(tmp_path), "--run-id", "t", "--json"]
    assert run(*args, "--trials", "10").exit_code == 0
    stray = tmp_path / "t" / ".pareto.png.999999999.k2x_9abc.png"  # a writer that was killed
    stray.write_bytes(b"")
    assert run(*args, "--trials", "15", "--resume").exit_code == 0
    assert not stray.exists() and (tmp_path / "t" / "pareto.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.parametrize("to_group", [False, True], ids=["parent", "process-group"])
def test_ctrl_c_stops_every_worker(tmp_path, small_study, to_group):
    p = subprocess.Popen(_search("--study", str(small_study), "--trials", "100000", "--results-dir", str(tmp_path),
                                 "--run-id", "c", "--n-workers", "2"), env=ENV, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    db = tmp_path / "c" / "study.journal"
    _wait_for_trials(db, 40, p)
    os.killpg(p.pid, signal.SIGINT) if to_group else p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err and err.strip().count("\n") == 0, err
    before = _states(db)
    time.sleep(2)
    assert _states(db) == before  # nothing goes on writing
    assert before.get("RUNNING", 0) == 0  # every worker closed its lease


def test_a_study_that_cannot_be_written_is_one_line(small_space, tmp_path):
    db = tmp_path / "ro.db"
    run_search(small_space, f"sqlite:///{db}", "ro", 10, seed=0)
    read_only = f"sqlite:///file:{db}?mode=ro&uri=true"
    with pytest.raises(InputError) as err:
        run_search(small_space, read_only, "ro", 20, seed=0, resume=True)
    assert "cannot write study 'ro'" in str(err.value) and "\n" not in str(err.value)
    assert completed(optuna.load_study(study_name="ro", storage=f"sqlite:///{db}")) == 10


def test_study_readers_skip_the_leases(small_space, tmp_path):
    url = f"sqlite:///{tmp_path / 'l.db'}"
    study = run_search(small_space, url, "l", 70, seed=0)
    states = {t.state for t in study.get_trials()}
    assert states <= {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL}
    from dfvg_dse.search import trials_frame
    assert len(trials_frame(study)) == 70


def test_slow_trials_renew_their_lease(small_space, tmp_path, monkeypatch):
    from dfvg_dse.search import studies
    monkeypatch.setattr(studies, "LEASE_RENEW_S", 0.0)  # every trial outlives its lease: each write renews
    monkeypatch.setattr(studies, "LEASE_SAFE_S", 0.0)
    study = run_search(small_space, f"sqlite:///{tmp_path / 'slow.db'}", "slow", 25, seed=0)
    assert completed(study) == 25


def test_resume_of_a_run_on_the_shipped_defaults(run, tmp_path):
    args = ["search", "--method", "optuna", "--results-dir", str(tmp_path), "--run-id", "d", "--json"]
    assert run(*args, "--trials", "8").exit_code == 0
    again = run(*args, "--trials", "12", "--resume")  # its saved request has no study file
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["trials"] == 12


@pytest.mark.slow
def test_a_killed_process_frees_its_slots_at_once(tmp_path, small_study):
    from dfvg_dse.search.studies import ledger
    p = subprocess.Popen(_search("--study", str(small_study), "--trials", "5000", "--results-dir", str(tmp_path),
                                 "--run-id", "k", "--json"), env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    db = tmp_path / "k" / "study.journal"
    _kill_when(p, db, 10)
    study = optuna.load_study(study_name="k", storage=storage(f"journal:{db}"))
    assert _states(db).get("RUNNING", 0) == 1  # its lease is still open ...
    assert ledger(study).outstanding == {}  # ... but counts for nothing: its process is gone


@pytest.mark.slow
def test_workers_stop_when_their_parent_is_killed(tmp_path, small_study):
    p = subprocess.Popen(_search("--study", str(small_study), "--trials", "100000", "--results-dir", str(tmp_path),
                                 "--run-id", "orphans", "--n-workers", "2"), env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    db = tmp_path / "orphans" / "study.journal"
    _kill_when(p, db, 40)
    time.sleep(2)  # a worker notices between two trials
    before = _states(db)
    time.sleep(2)
    assert _states(db) == before


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [0.6, 1.2, 2.0])
def test_ctrl_c_while_workers_start(tmp_path, small_study, after_s):
    p = subprocess.Popen(_search("--study", str(small_study), "--trials", "100000", "--results-dir", str(tmp_path),
                                 "--run-id", "early", "--n-workers", "2"), env=ENV, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(after_s)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode in (130, 2) and "Traceback" not in err and err.strip().count("\n") == 0, err


@pytest.mark.skipif(not HOLDS_SIGNALS, reason="no pthread_sigmask: SIGINT is ignored while workers start")
def test_a_ctrl_c_while_workers_start_is_held_not_lost():
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: seen.append(number))
    try:
        with spawning_quietly():
            # to this thread, which holds it (a process-directed one could land on another of pytest's threads)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            time.sleep(0.05)  # long enough for it to be handled, were it not held
            inside = list(seen)
        after = list(seen)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with pytest.raises(KeyboardInterrupt):  # under Python's own handler: the interrupt comes as the block ends
            with spawning_quietly():
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert inside == [] and after == [signal.SIGINT]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the mask is restored


def _held_child(report) -> None:
    """Started inside `spawning_quietly`: waits until the SIGINT its parent sent is pending (held
    through the interpreter's start and the imports), then starts as a worker does."""
    deadline = time.monotonic() + 10  # it is pending before this runs: the wait is for a failure
    while signal.SIGINT not in signal.sigpending() and time.monotonic() < deadline:
        time.sleep(0.01)
    held = signal.SIGINT in signal.sigpending()
    ignore_interrupts()
    signal.raise_signal(signal.SIGINT)  # a Ctrl-C once it has started: ignored
    report.put((held, signal.SIGINT in signal.sigpending(), signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])))


@pytest.mark.skipif(not HOLDS_SIGNALS, reason="no pthread_sigmask: SIGINT is ignored while workers start")
def test_a_worker_started_while_ctrl_c_is_held_ignores_it():
    context = multiprocessing.get_context("spawn")  # as run_search starts its workers
    report = context.SimpleQueue()
    child = context.Process(target=_held_child, args=(report,))
    with spawning_quietly():
        child.start()
        os.kill(child.pid, signal.SIGINT)  # a Ctrl-C to the process group reaches the child too
    child.join(timeout=120)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0  # not killed by the pending SIGINT, nor interrupted by the later one
    assert report.get() == (True, False, False)  # it was held; then discarded, and SIGINT is unblocked


def test_pareto_and_export_remove_what_a_killed_redraw_left(run, tmp_path, small_study):
    args = ["search", "--method", "optuna", "--study", str(small_study), "--results-dir", str(tmp_path), "--run-id", "p", "--json"]
    assert run(*args, "--trials", "10").exit_code == 0
    strays = [tmp_path / "p" / ".pareto.png.999999998.ab_cdefg.png", tmp_path / "p" / ".export-knee.json.999999997.x1y2z3w4.json"]
    for stray in strays:
        stray.write_bytes(b"")
    assert run("pareto", str(tmp_path / "p")).exit_code == 0
    assert run("export", str(tmp_path / "p")).exit_code == 0
    assert not any(s.exists() for s in strays)


DAMAGED = [
    ("manifest.json", "[" * 100000 + "]" * 100000, "nested too deeply"),
    ("manifest.json", "[]", "expected a JSON object"),
    ("manifest.json", '{"kind": "search", "inputs": 5, "summary": {}}', "inputs must be an object"),
    ("recommended.json", "{bad", "not valid JSON"),
    ("recommended.json", '{"knee": 5}', "knee: must be an object"),
    ("trials.csv", None, "column j_per_token must hold numbers"),
    ("trials.csv", "nan", "j_per_token = nan in a feasible design"),
]


@pytest.mark.parametrize("name,content,message", DAMAGED, ids=[f"{n}-{m.split()[0]}" for n, _, m in DAMAGED])
def test_damaged_run_files_are_one_line(run, tmp_path, small_study, name, content, message):
    assert run("search", "--method", "optuna", "--study", str(small_study), "--results-dir", str(tmp_path), "--run-id", "z", "--trials",
               "10", "--json").exit_code == 0
    target = tmp_path / "z" / name
    if name == "trials.csv":
        import pandas as pd
        frame = pd.read_csv(target)
        frame["j_per_token"] = frame["j_per_token"].astype(object)
        frame.loc[frame.index[frame["feasible"]][0], "j_per_token"] = content or "lots"
        frame.to_csv(target, index=False)
    else:
        target.write_text(content)
    for command in (["export", str(tmp_path / "z")], ["pareto", str(tmp_path / "z")]):
        if name == "recommended.json" and command[0] == "pareto":
            continue
        result = run(*command)
        assert result.exit_code == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_a_recommended_design_with_a_broken_tree_is_refused(run, tmp_path, small_study):
    assert run("search", "--method", "optuna", "--study", str(small_study), "--results-dir", str(tmp_path), "--run-id", "y", "--trials",
               "10", "--json").exit_code == 0
    path = tmp_path / "y" / "recommended.json"
    picks = json.loads(path.read_text())
    picks["knee"]["parents"] = "x"
    path.write_text(json.dumps(picks))
    result = run("export", str(tmp_path / "y"), "--format", "vllm")
    assert result.exit_code == 2 and "knee.parents: must be a list" in result.stderr
