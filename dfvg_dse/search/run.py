"""Running a search: one process or several on one study, each sampling in memory (docs/search.md).

Every process runs `work`: its sampler is an in-memory study (seeded: one process is
deterministic), it evaluates a design, and writes the completed trial to the persistent study
against a lease (search/studies.py) that keeps the study's count exact, whatever the number of
processes or machines. At each new lease it reads the trials other processes wrote into its
sampler. The first EXPLORE_SHARE of the trials come from the sampler alone; then the unvisited
neighbours of the first non-dominated fronts are evaluated, round after round, and when none is
left the sampler goes on.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import threading
import warnings
import zlib
from typing import Callable

import numpy as np
import optuna

from dfvg_dse.pipeline.grid import SearchSpace
from dfvg_dse.pipeline.pareto import pareto_mask
from dfvg_dse.search.designs import make_objective, neighbours
from dfvg_dse.search.studies import (DIRECTIONS, JOURNAL, OWNER_ATTR, STORAGE_ERRORS, Lease, _storage_error,
                                     close_expired_leases, completed, open_study, storage)
from dfvg_dse.specs import InputError

SAMPLERS = ("nsga2", "tpe", "random", "qmc")
EXPLORE_SHARE = 0.6  # the sampler alone for this share of the trials, then refinement around the front
REFINE_FRONTS = 2  # expand the first non-dominated fronts: the second bridges dominated valleys
SYNC_EVERY = 8  # a process that shares its study reads the others' trials after this many of its own
STOP_WAIT_S = 10.0  # after Ctrl-C, how long workers get to finish their trial and close their lease


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed)
    raise InputError(f"--sampler {name!r}: allowed: {', '.join(SAMPLERS)}")


def first_fronts(values: np.ndarray, count: int) -> np.ndarray:
    """Indices of the first `count` non-dominated fronts (NSGA-II's ranks 0 .. count-1)."""
    remaining = np.arange(len(values))
    chosen = []
    for _ in range(count):
        if not len(remaining):
            break
        mask = pareto_mask(values[remaining])
        chosen.extend(remaining[mask])
        remaining = remaining[~mask]
    return np.asarray(chosen, dtype=int)


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


class _Refiner:
    """Queues the unvisited neighbours of the memory study's first fronts; on the default space this
    lifts the hypervolume from about 0.95 to 0.998+ of the exact front at 2,000 trials."""

    def __init__(self, memory: optuna.Study, space: SearchSpace, share: tuple[int, int] = (0, 1)):
        self.memory, self.space = memory, space
        self.index, self.count = share  # local worker `index` of `count` takes its share of the neighbours
        self.queued = 0  # enqueued and not yet asked for
        self.exhausted = False  # nothing new near the front: the sampler goes on alone
        self.pause = 0  # with a share: trials left to the sampler before looking at the front again
        self.feasible: dict[int, bool] = {}  # memory trial number -> feasible (its record, parsed once)

    def before_ask(self, budget: int) -> None:
        if self.queued or self.exhausted or budget <= 0:
            return
        if self.pause:
            self.pause -= 1
            return
        trials = [t for t in self.memory.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                  if self._feasible(t)]
        seen = {_key(t.params) for t in self.memory.get_trials(deepcopy=False)}
        if trials:
            for i in first_fronts(np.array([t.values for t in trials]), REFINE_FRONTS):
                for params in neighbours(trials[i].params, self.space):
                    key = _key(params)
                    if key not in seen and self.queued < budget and self._mine(key):
                        seen.add(key)
                        self.memory.enqueue_trial(params)
                        self.queued += 1
        if not self.queued:  # alone: nothing is left near the front; with a share, others may add to it
            self.exhausted, self.pause = self.count == 1, SYNC_EVERY

    def _feasible(self, trial: optuna.trial.FrozenTrial) -> bool:
        if trial.number not in self.feasible:
            self.feasible[trial.number] = bool(json.loads(trial.user_attrs.get("record", "{}")).get("feasible"))
        return self.feasible[trial.number]

    def _mine(self, key: tuple) -> bool:
        return self.count == 1 or zlib.crc32(repr(key).encode()) % self.count == self.index

    def asked(self) -> None:
        self.queued = max(0, self.queued - 1)


def _sync(memory: optuna.Study, persistent: optuna.Study, seen: set, mine: set) -> int:
    """Trials the other processes wrote (and, at the start, those of earlier runs) into the sampler;
    returns the study's completed trials."""
    trials = persistent.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    new = [t for t in trials if t.number not in seen and t.user_attrs.get(OWNER_ATTR) not in mine]
    seen.update(t.number for t in new)
    if new:
        memory.add_trials(new)
    return len(trials)


# TODO(issue 16): storage is off the hot path (journal, 2,000 trials in 9 s of CPU, docs/search.md);
# next: evaluate small grids exactly and seed Optuna from the grid's front, keep NSGA-II's bookkeeping
# linear in trials (_Refiner copies every trial each round), a 10^8-point benchmark space.
def work(space: SearchSpace, url: str, name: str, n_trials: int, sampler: str = "nsga2", seed: int = 0,
         stop: Callable[[], bool] = lambda: False, on_trial: Callable[[int], None] | None = None,
         share: tuple[int, int] = (0, 1)) -> None:
    """Evaluate designs until the study holds `n_trials` completed trials (see the module docstring).
    `share` (index, count) splits the refinement's neighbours among local workers."""
    store = storage(url)
    persistent = optuna.load_study(study_name=name, storage=store)
    memory = optuna.create_study(directions=list(DIRECTIONS), sampler=make_sampler(sampler, seed))
    objective, refiner = make_objective(space), _Refiner(memory, space, share)
    lease = Lease(persistent, store, n_trials)
    seen, mine, done, written = set(), set(), 0, 0
    shared = share[1] > 1 or not url.startswith(("sqlite", JOURNAL))  # others may write to the study meanwhile
    try:
        while not stop():
            if lease.left() <= 0:
                book = lease.acquire(stop)
                if book is None:
                    break
                mine.add(lease.number)
                _sync(memory, persistent, seen, mine)
                done = book.complete
            if shared and written % SYNC_EVERY == 0:  # what the others found, and how far the study is
                done = _sync(memory, persistent, seen, mine)
            if done >= int(n_trials * EXPLORE_SHARE):
                refiner.before_ask(n_trials - done)
            trial = memory.ask()
            refiner.asked()
            frozen = memory.tell(trial, objective(trial))
            if not lease.write(frozen, stop):  # the others completed the study meanwhile
                break
            if lease.number not in mine:  # renewed while this trial ran
                mine.add(lease.number)
            done, written = done + 1, written + 1
            if on_trial:
                on_trial(done)
    except STORAGE_ERRORS as err:
        raise _storage_error(url, err, f"write study '{name}' (its completed trials are kept)") from None
    finally:
        try:
            lease.release()
        except Exception:  # noqa: BLE001 (the lease then expires on its own after LEASE_TTL_S)
            pass


def _worker(space: SearchSpace, url: str, name: str, n_trials: int, sampler: str, seed: int, share: tuple[int, int],
            stop, errors, parent: int) -> None:
    """A worker process: Ctrl-C goes to the parent, which sets `stop`; a worker whose parent died
    (kill -9, SIGTERM) stops too, even one still starting when it died (the parent's pid is passed
    in, not read here); an InputError goes back as text."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        work(space, url, name, n_trials, sampler, seed, lambda: stop.is_set() or os.getppid() != parent, share=share)
    except InputError as err:
        errors.put(str(err))
        raise SystemExit(2) from None


@contextlib.contextmanager
def _interrupts_ignored():
    """SIGINT ignored while child processes are started (an ignored signal stays ignored across exec)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _interrupt_between_trials():
    """Ctrl-C in this process sets a flag the work loop reads between trials, so the trial in hand is
    written and the lease closed in one piece; the interrupt is raised when the loop has stopped. A
    second Ctrl-C interrupts at once (the lease then lapses after LEASE_TTL_S)."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    hit = threading.Event()

    def handler(signum, frame):
        if hit.is_set():
            raise KeyboardInterrupt
        hit.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield hit.is_set
    finally:
        signal.signal(signal.SIGINT, previous)
    if hit.is_set():
        raise KeyboardInterrupt


def _stop(workers: list, stop) -> None:
    stop.set()
    for w in workers:
        w.join(timeout=STOP_WAIT_S)
    for w in workers:
        if w.is_alive():
            w.terminate()
            w.join(timeout=2.0)
        if w.is_alive():
            w.kill()
            w.join()


def run_search(space: SearchSpace, url: str, name: str, n_trials: int, seed: int = 0, sampler: str = "nsga2",
               resume: bool = False, n_workers: int = 1,
               on_trial: Callable[[int], None] | None = None) -> optuna.Study:
    """Run (or resume, or join) a study until it holds `n_trials` completed trials.

    With n_workers > 1, this process and n_workers - 1 more work on the storage (seeds seed,
    seed + 1, ...); their order is not deterministic. A Ctrl-C lets each finish its trial and close
    its lease."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    persistent = open_study(url, name, resume)
    if resume:
        try:
            close_expired_leases(persistent, storage(url))
        except STORAGE_ERRORS as err:
            raise _storage_error(url, err, f"write study '{name}'") from None
    if n_workers == 1:
        with _interrupt_between_trials() as interrupted:
            work(space, url, name, n_trials, sampler, seed, stop=interrupted, on_trial=on_trial)
        return persistent
    context = multiprocessing.get_context("spawn")
    stop, errors = context.Event(), context.SimpleQueue()
    seeds = [(seed + i) % 2**32 for i in range(n_workers)]  # numpy's seed range
    workers = [context.Process(target=_worker, args=(space, url, name, n_trials, sampler, s, (i, n_workers), stop,
                                                     errors, os.getpid())) for i, s in enumerate(seeds) if i]
    try:
        with _interrupts_ignored():  # children start with SIGINT ignored: Ctrl-C during their imports is the parent's
            for w in workers:
                w.start()

        def progress(_done: int) -> None:  # the study's count, all workers together
            if on_trial:
                on_trial(completed(persistent))
        with _interrupt_between_trials() as interrupted:
            work(space, url, name, n_trials, sampler, seeds[0], stop=interrupted, on_trial=progress,
                 share=(0, n_workers))
        while any(w.is_alive() for w in workers):
            next(w for w in workers if w.is_alive()).join(timeout=0.5)
    except BaseException:
        _stop(workers, stop)
        raise
    if not errors.empty():
        raise InputError(errors.get())
    failed = [w.exitcode for w in workers if w.exitcode]
    if failed:
        raise InputError(f"a search worker stopped with exit code {failed[0]}; completed trials are kept in "
                         f"{url} (rerun with --resume)")
    return persistent


def param_importances(study: optuna.Study) -> dict:
    """Importance of each parameter for throughput (PED-ANOVA: fast, no extra dependency)."""
    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(trials) < 20:
        return {}
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    memory = optuna.create_study(directions=list(DIRECTIONS))
    memory.add_trials(trials)
    try:
        with warnings.catch_warnings():  # PED-ANOVA reminds that it ranks low targets; ours is negated
            warnings.simplefilter("ignore", UserWarning)
            return dict(optuna.importance.get_param_importances(memory, evaluator=evaluator,
                                                                target=lambda t: -t.values[0]))
    except (ValueError, RuntimeError):  # e.g. a parameter that never varied
        return {}
