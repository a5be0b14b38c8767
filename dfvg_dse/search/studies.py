"""The persistent study: its storage, and the leases that keep a shared study's count exact.

Several processes (local workers, or machines on one PostgreSQL URL) may work on one study. Each
samples in memory and writes a completed trial to the storage in one transaction (`add_trial`),
so the storage is off the hot path. What keeps the study at exactly `--trials` completed trials,
whatever the number of processes, is a ledger in the study itself:

- A process may write trials only against a *lease*: a RUNNING trial it creates (one
  transaction) with the user attribute `LEASE_ATTR` = its size K. Every trial it writes names its
  lease (`OWNER_ATTR`). A lease's *outstanding* count is K minus the trials written against it.
- A lease is granted only when the completed trials, plus the outstanding counts of the live
  leases numbered below it, plus K, stay within the target; else it shrinks to what is left, or
  is closed and the process waits. Lower-numbered leases have priority and numbers follow
  creation order (optuna numbers trials under a row lock of the study), so no two processes can
  both take the last slot, and the lowest lease can always proceed: no deadlock.
- A lease lives `LEASE_TTL_S` from its start. Its holder renews it (closes it, asks for a new one)
  well before that, so a killed process's lease stops counting after at most LEASE_TTL_S, with no
  heartbeat needed; closed and expired leases are FAIL trials, which no table reads.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
import warnings
from collections import Counter
from typing import NamedTuple

import optuna

from dfvg_dse.specs import InputError

DIRECTIONS = ("maximize", "minimize")
LEASE_ATTR = "dfvg_lease"  # on a lease trial: how many trials it may write
OWNER_ATTR = "dfvg_lease_of"  # on a written trial: the number of the lease it counts against
LEASE_MAX = 32  # trials per lease: about a third of a second of work, one extra transaction per lease
LEASE_TTL_S = 60.0  # a lease older than this no longer counts (its holder died); clocks must agree within ~30 s
LEASE_RENEW_S = 15.0  # a holder takes no new trial on a lease older than this
LEASE_SAFE_S = 45.0  # nor writes one on it (a slow trial's lease is renewed first): others count it to LEASE_TTL_S
HOLDER_ATTR = "dfvg_lease_holder"  # on a lease: "host:pid" of its process; a dead local holder's lease lapses at once
WAIT_S = 0.25  # how often a process with no slot left looks at the ledger again
COMPLETE, RUNNING, FAIL = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING,
                           optuna.trial.TrialState.FAIL)


def _storage_error(url: str, err: Exception, doing: str) -> InputError:
    cause = err.__cause__ or err.__context__ or err  # optuna wraps the driver's own reason
    text = (str(cause).strip() or type(cause).__name__).splitlines()[0]
    where = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url.removeprefix(JOURNAL) \
        if url.startswith(JOURNAL) else f"--storage {url}"  # the run's own file
    return InputError(f"{where}: cannot {doing}: {text}")


STORAGE_ERRORS = (optuna.exceptions.StorageInternalError, OSError)


JOURNAL = "journal:"  # a journal file: journal:PATH
LOCK_GRACE_S = 10  # a journal lock older than this was left by a killed writer (an append takes milliseconds)


def _cut_torn_line(path: str, lock) -> None:
    """A kill -9 in the middle of an append leaves a torn last line. Optuna skips it while it is
    the last line but refuses the file once another follows, so it is cut off, under the writers'
    lock, before the journal is opened: only a trial that was never completed is in it."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            whole = size == 0 or (f.seek(size - 1) >= 0 and f.read(1) == b"\n")
    except FileNotFoundError:
        return
    if whole:
        return
    lock.acquire()
    try:
        with open(path, "r+b") as f:
            data = f.read()
            f.truncate(data.rfind(b"\n") + 1)
    finally:
        lock.release()


def storage(url: str) -> optuna.storages.BaseStorage:
    """A journal file (journal:PATH) or an RDB storage (SQLite file, PostgreSQL, any SQLAlchemy URL);
    a bad URL is one InputError line."""
    if url.startswith(JOURNAL):
        path = url.removeprefix(JOURNAL)
        try:
            lock = optuna.storages.journal.JournalFileOpenLock(path, grace_period=LOCK_GRACE_S)
            _cut_torn_line(path, lock)
            return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(path, lock_obj=lock))
        except Exception as err:  # noqa: BLE001 (an unreadable or unwritable file, a foreign file)
            raise _storage_error(url, err, "open it") from None
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}}
                                          if url.startswith("sqlite") else {})
    except Exception as err:  # SQLAlchemy and drivers raise many types for a bad URL or an unreachable server
        raise _storage_error(url, err, "open it") from None


def open_study(url: str, name: str, resume: bool) -> optuna.Study:
    """The persistent study: created afresh, or loaded with --resume."""
    store = storage(url)
    if resume:
        try:
            return optuna.load_study(study_name=name, storage=store)
        except KeyError:
            raise InputError(f"--resume: no study '{name}' in {url}") from None
    try:
        return optuna.create_study(study_name=name, storage=store, directions=list(DIRECTIONS),
                                   load_if_exists=False)
    except optuna.exceptions.DuplicatedStudyError:
        raise InputError(f"a study named '{name}' already exists in {url}; pass --resume to join it or "
                         "choose another --run-id") from None
    except STORAGE_ERRORS as err:
        raise _storage_error(url, err, "create the study") from None


def study_exists(url: str, name: str) -> bool:
    return name in {s.study_name for s in optuna.get_all_study_summaries(storage(url))}


def completed(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(COMPLETE,)))


class Ledger(NamedTuple):
    complete: int
    outstanding: dict  # live lease number -> trials it may still write


def _now() -> datetime.datetime:
    return datetime.datetime.now()


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _holder_gone(holder: object) -> bool:
    """A lease's process ran on this machine and has exited (a kill -9): its slots are free now."""
    host, _, pid = str(holder).rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's: only its age tells
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _live(trial: optuna.trial.FrozenTrial, oldest: datetime.datetime) -> bool:
    return (trial.state == RUNNING and LEASE_ATTR in trial.user_attrs and trial.datetime_start is not None
            and trial.datetime_start > oldest and not _holder_gone(trial.user_attrs.get(HOLDER_ATTR)))


class StudyTally:
    """A study's trials, each finished one read once (issue 16: reading the whole study at every lease
    renewal made a search quadratic in its trials): the completed count, the trials written against
    each lease, the unfinished trials (leases) to look at again, and the completed trials not yet taken."""

    def __init__(self, study: optuna.Study):
        self.study = study
        self.read_to = 0  # trials before this position have been placed
        self.unfinished: set[int] = set()  # positions of trials that were not finished when read
        self.complete = 0
        self.written: Counter = Counter()  # lease number -> completed trials written against it
        self.fresh: list = []  # completed trials not yet taken

    def update(self) -> list:
        trials = self.study.get_trials(deepcopy=False)  # references, in trial-number order
        for i in range(self.read_to, len(trials)):
            if trials[i].state.is_finished():
                self._count(trials[i])
            else:
                self.unfinished.add(i)
        self.read_to = len(trials)
        for i in [i for i in self.unfinished if trials[i].state.is_finished()]:
            self.unfinished.discard(i)
            self._count(trials[i])
        return trials

    def _count(self, trial: optuna.trial.FrozenTrial) -> None:
        if trial.state == COMPLETE:
            self.complete += 1
            self.written[trial.user_attrs.get(OWNER_ATTR)] += 1
            self.fresh.append(trial)

    def ledger(self) -> Ledger:
        """Completed trials and the live leases' outstanding counts."""
        trials = self.update()
        oldest = _now() - datetime.timedelta(seconds=LEASE_TTL_S)
        live = {trials[i].number: max(0, int(trials[i].user_attrs[LEASE_ATTR]) - self.written[trials[i].number])
                for i in self.unfinished if _live(trials[i], oldest)}
        return Ledger(self.complete, live)

    def take(self) -> list:
        """The completed trials read since the last take."""
        taken, self.fresh = self.fresh, []
        return taken


def ledger(study: optuna.Study) -> Ledger:
    """Completed trials and the live leases' outstanding counts, from one read of the study."""
    return StudyTally(study).ledger()


class Lease:
    """The right to write up to `size` more trials to a shared study; see the module's docstring."""

    def __init__(self, study: optuna.Study, store: optuna.storages.RDBStorage, target: int):
        self.study, self.store, self.target = study, store, target
        self.tally = StudyTally(study)
        self.trial_id = self.number = None
        self.size = self.written = 0
        self.started = 0.0

    def left(self) -> int:
        return self.size - self.written if self.trial_id is not None and \
            time.monotonic() - self.started < LEASE_RENEW_S else 0

    def acquire(self, stop=lambda: False) -> Ledger | None:
        """Hold a lease with at least one slot; None when the study has reached its target (or
        `stop()` turned true while waiting for a slot that another process holds)."""
        if self.left() > 0:
            return self.tally.ledger()
        return self._renew(stop)

    def _renew(self, stop=lambda: False) -> Ledger | None:
        self.release()
        while not stop():
            book = self.tally.ledger()
            if book.complete >= self.target:
                return None
            free = self.target - book.complete - sum(book.outstanding.values())
            if free > 0 and self._grant(min(LEASE_MAX, free)):
                return self.tally.ledger()
            time.sleep(WAIT_S)  # the last slots are leased by others: wait for them (or their expiry)
        return None

    def _grant(self, size: int) -> bool:
        template = optuna.trial.create_trial(state=RUNNING, user_attrs={LEASE_ATTR: size, HOLDER_ATTR: _holder()})
        study_id = self.store.get_study_id_from_name(self.study.study_name)
        self.trial_id = self.store.create_new_trial(study_id, template_trial=template)
        self.number = self.store.get_trial_number_from_id(self.trial_id)
        self.started, self.size, self.written = time.monotonic(), size, 0
        book = self.tally.ledger()  # now that it is in the ledger: what the leases before it leave
        room = self.target - book.complete - sum(n for k, n in book.outstanding.items() if k < self.number)
        if room < size:
            if room <= 0:
                self.release()
                return False
            self.store.set_trial_user_attr(self.trial_id, LEASE_ATTR, room)  # shrinking only frees slots
            self.size = room
        return True

    def write(self, trial: optuna.trial.FrozenTrial, stop=lambda: False) -> bool:
        """Write one completed trial against the lease (one transaction). A lease that is full or
        too old for it (a slow trial) is renewed first; False when the study reached its target
        meanwhile (the trial is then one too many, and is not written)."""
        if self.trial_id is None or self.written >= self.size or time.monotonic() - self.started >= LEASE_SAFE_S:
            if self._renew(stop) is None:
                return False
        self.study.add_trial(optuna.trial.create_trial(
            values=trial.values, params=trial.params, distributions=trial.distributions,
            user_attrs={**trial.user_attrs, OWNER_ATTR: self.number}, system_attrs=trial.system_attrs))
        self.written += 1
        return True

    def release(self) -> None:
        """Close the lease (its unused slots go back to the study)."""
        if self.trial_id is None:
            return
        trial_id, self.trial_id = self.trial_id, None
        try:
            self.store.set_trial_state_values(trial_id, FAIL)
        except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):  # closed by a cleanup already
            pass


def close_expired_leases(study: optuna.Study, store: optuna.storages.RDBStorage) -> int:
    """Mark leases that outlived LEASE_TTL_S (their process died) as FAIL; returns how many."""
    oldest = _now() - datetime.timedelta(seconds=LEASE_TTL_S)
    closed, study_id = 0, store.get_study_id_from_name(study.study_name)
    for t in study.get_trials(deepcopy=False, states=(RUNNING,)):
        if LEASE_ATTR in t.user_attrs and t.datetime_start is not None and t.datetime_start <= oldest:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    store.set_trial_state_values(store.get_trial_id_from_study_id_trial_number(study_id, t.number), FAIL)
                    closed += 1
                except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):
                    pass
    return closed
