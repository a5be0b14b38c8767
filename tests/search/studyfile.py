"""What a run's study file holds, read from outside the process that writes it: the run's journal
(`study.journal`, the default since issue 16) through optuna's reader, or an SQLite file (`--storage
sqlite:///...`, runs made before) read only, without optuna."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import optuna


def _journal_trials(path: Path) -> list:
    backend = optuna.storages.journal.JournalFileBackend(str(path), lock_obj=optuna.storages.journal.JournalFileOpenLock(str(path)))
    store = optuna.storages.JournalStorage(backend)
    return [t for s in store.get_all_studies() for t in store.get_all_trials(s._study_id, deepcopy=False)]


def states(path: Path) -> dict:
    """Trials per state name (COMPLETE, RUNNING, FAIL); {} before the file or its schema exists."""
    if not path.is_file():
        return {}
    if path.suffix == ".journal":
        return dict(Counter(t.state.name for t in _journal_trials(path)))
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as connection:
        try:
            return dict(connection.execute("SELECT state, COUNT(*) FROM trials GROUP BY state").fetchall())
        except sqlite3.Error:  # not created yet
            return {}


def completed_trials(path: Path) -> Counter:
    """Completed trials as (params, values): what a resume must never lose or change."""
    if not path.is_file():
        return Counter()
    if path.suffix == ".journal":
        return Counter((tuple(sorted((k, repr(v)) for k, v in t.params.items())), tuple(t.values))
                       for t in _journal_trials(path) if t.state.name == "COMPLETE")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as c:
        try:
            rows = c.execute("SELECT trial_id FROM trials WHERE state = 'COMPLETE'").fetchall()
            params = c.execute("SELECT trial_id, param_name, param_value FROM trial_params").fetchall()
            values = c.execute("SELECT trial_id, objective, value FROM trial_values").fetchall()
        except sqlite3.Error:  # killed before the schema existed
            return Counter()
    ids = {r[0] for r in rows}
    key = {i: ([], []) for i in ids}
    for i, name, value in sorted(params):
        if i in ids:
            key[i][0].append((name, value))
    for i, _, value in sorted(values):
        if i in ids:
            key[i][1].append(value)
    return Counter((tuple(p), tuple(v)) for p, v in key.values())
