"""Running a search: its plan, then one process or several on one study, each sampling in memory
(docs/search.md).

`plan_search` chooses how the space is covered: exact (every grid point, the exact front written
as the run's trials) when the grid is small, seeded (a random grid sample's front written first)
past that, or the sampler alone. Every process runs `work`: its sampler is an in-memory study
(seeded: one process is deterministic), it evaluates a design, and writes the completed trial to
the persistent study against a lease (search/studies.py) that keeps the study's count exact,
whatever the number of processes or machines. At each new lease it reads the trials other
processes wrote into its sampler. The plan's designs come first; the first EXPLORE_SHARE of the
trials come from the sampler alone; then the unvisited neighbours of the first non-dominated
fronts are evaluated, round after round, and when none is left the sampler goes on.
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
from dataclasses import dataclass
from typing import Callable

import numpy as np
import optuna

from dfvg_dse.processes import ignore_interrupts, spawning_quietly
from dfvg_dse.pipeline.grid import GridFront, SearchSpace, grid_chunks, grid_front, grid_size, sample_grid
from dfvg_dse.pipeline.pareto import pareto_mask
from dfvg_dse.search.designs import grid_designs, make_objective, neighbours, prepare
from dfvg_dse.search.samplers import finished_since, make_sampler
from dfvg_dse.search.studies import (DIRECTIONS, JOURNAL, OWNER_ATTR, STORAGE_ERRORS, Lease, _storage_error,
                                     close_expired_leases, completed, open_study, storage)
from dfvg_dse.specs import InputError

EXPLORE_SHARE = 0.6  # the sampler alone for this share of the trials, then refinement around the front
REFINE_FRONTS = 2  # expand the first non-dominated fronts: the second bridges dominated valleys
SYNC_EVERY = 8  # a process that shares its study reads the others' trials after this many of its own
STOP_WAIT_S = 10.0  # after Ctrl-C, how long workers get to finish their trial and close their lease
# POSIX: SIGINT is blocked (held) while workers start, so a Ctrl-C then is delivered once they have started;
# elsewhere (Windows) it is ignored meanwhile, and one in that window is lost


METHODS = ("auto", "exact", "seeded", "optuna")
# The whole grid is evaluated when it has at most this many points: about 1 s of CPU on this machine
# (benchmarks/bench_search.py), less than the 500 trials of the default search cost (docs/search.md).
EXACT_MAX_POINTS = 200_000
EXACT_HARD_MAX_POINTS = 2 * 10**8  # --method exact past this would run for more than a quarter of an hour: refused
SEED_POINTS = 50_000  # a seeded search evaluates this many grid points drawn at random, vectorised
SEED_SHARE = 0.25  # ... and writes at most this share of its trials from their front first


@dataclass(frozen=True)
class Plan:
    """How a search covers its space: `exact` evaluates every grid point and writes the exact front as
    the run's trials; `seeded` writes the front of a random (or, when small, the whole) grid first and
    lets the sampler go on; `optuna` samples alone."""

    method: str
    why: str  # said to the user
    grid_points: int  # static designs in the space's grid (ADAPT has none)
    queue: tuple = ()  # designs (trial parameters) written first, in order
    front: GridFront | None = None  # the exact front, when the whole grid was evaluated

    def trials(self, asked: int) -> int:
        return len(self.queue) if self.method == "exact" else asked


def _counted(grids, total: int, on_points: Callable[[int, int], None] | None):
    """The pieces of a scan, telling `on_points(points done, total)` after each."""
    done = 0
    for grid in grids:
        yield grid
        done += len(grid.shape_idx)
        if on_points:
            on_points(done, total)


def plan_search(space: SearchSpace, method: str, trials: int, seed: int = 0,
                on_points: Callable[[int, int], None] | None = None) -> Plan:
    """The method for a space (see Plan): `auto` is exact up to EXACT_MAX_POINTS static grid points,
    else seeded; a space of ADAPT alone has no grid and is sampled. `on_points` hears how far a scan
    of the whole grid is."""
    if method not in METHODS:
        raise InputError(f"--method {method!r}: allowed: {', '.join(METHODS)}")
    if space.serving is not None:  # every design is served under load: there is no closed-form grid to scan
        if method in ("exact", "seeded"):
            raise InputError(f"--method {method}: a search under load (--rate) serves each design; it has no grid "
                             "(use --method optuna or auto)")
        return Plan("optuna", f"every design served under {space.serving.load.rate_per_s:g} requests/s "
                    "(no closed-form grid under load)", 0)
    static = [f for f in space.families if f != "adapt"]
    shapes = prepare(space).shapes if static else []
    size = grid_size(space, shapes) if shapes else 0
    small = 0 < size <= EXACT_MAX_POINTS
    exact_asked = method == "exact" or (method == "auto" and small and len(static) == len(space.families))
    if exact_asked and len(static) < len(space.families):
        raise InputError("--method exact: the space has the adapt family, which has no grid (a Monte Carlo run "
                         "per design); use " + ("--method seeded or optuna" if static else "--method optuna"))
    if exact_asked and size > EXACT_HARD_MAX_POINTS:
        raise InputError(f"--method exact: {size:,} grid points; at most {EXACT_HARD_MAX_POINTS:,} (use --method "
                         "seeded or optuna)")
    # the whole grid is scanned when asked, or when it is small enough to give the hypervolume's front
    exact = grid_front(space, _counted(grid_chunks(space, shapes), size, on_points)) if exact_asked or small else None
    if exact_asked:
        if not exact.feasible:  # nothing to write: the space itself is the problem
            reason = max(exact.reasons, key=exact.reasons.get)
            raise InputError(f"no feasible design among the space's {size:,} grid points (the most common reason, "
                             f"{exact.reasons[reason]:,} points: {reason})")
        designs = grid_designs(space, exact.grid)
        fastest_first = np.argsort(-exact.values[:, 0], kind="stable")
        return Plan("exact", f"all {size:,} grid points evaluated" + (f" (at most {EXACT_MAX_POINTS:,} are by default)"
                    if method == "auto" else ""), size, tuple(designs[i] for i in fastest_first), exact)
    if method == "optuna" or (method == "auto" and not size):
        return Plan("optuna", "the sampler alone" if size else "the space's adapt family has no grid", size,
                    front=exact)
    if not size:
        raise InputError("--method seeded: the space has no static tree family to seed from (adapt alone)")
    seeds = exact if exact is not None else grid_front(space, [sample_grid(space, shapes, SEED_POINTS, seed)])
    count = min(len(seeds.values), max(1, int(trials * SEED_SHARE)))
    order = np.argsort(-seeds.values[:, 0], kind="stable")  # along the front, fastest first
    chosen = order[np.unique(np.linspace(0, len(order) - 1, count).round().astype(int))] if len(order) else order
    designs = grid_designs(space, seeds.grid)
    where = "the whole grid's" if exact is not None else \
        f"{size:,} grid points (more than {EXACT_MAX_POINTS:,} to evaluate exactly): {SEED_POINTS:,} drawn at random, their"
    return Plan("seeded", f"{where} front ({len(chosen)} designs) first, then the sampler", size,
                tuple(designs[i] for i in chosen), exact)


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
    lifts the hypervolume from about 0.95 to 0.998+ of the exact front at 2,000 trials. It reads each
    finished trial of the memory study once (issue 16: no pass over every trial per round)."""

    def __init__(self, memory: optuna.Study, space: SearchSpace, share: tuple[int, int] = (0, 1)):
        self.memory, self.space = memory, space
        self.index, self.count = share  # local worker `index` of `count` takes its share of the neighbours
        self.queued = 0  # enqueued and not yet asked for
        self.exhausted = False  # nothing new near the front: the sampler goes on alone
        self.pause = 0  # with a share: trials left to the sampler before looking at the front again
        self.scanned = 0  # memory trials before this index are finished and read
        self.seen: set = set()  # designs evaluated
        self.values: list = []  # objectives of the feasible completed trials, in their order
        self.params: list = []

    def _read(self) -> None:
        for t in finished_since(self.memory, self.scanned):
            self.seen.add(_key(t.params))
            if t.state == optuna.trial.TrialState.COMPLETE and \
                    json.loads(t.user_attrs.get("record", "{}")).get("feasible"):
                self.values.append(t.values)
                self.params.append(t.params)
            self.scanned += 1

    def before_ask(self, budget: int) -> None:
        if self.queued or self.exhausted or budget <= 0:
            return
        if self.pause:
            self.pause -= 1
            return
        self._read()
        if self.values:
            # a queued neighbour that names only what it changes is filled in by the sampler: only the
            # designs evaluated count as seen, so a later round may queue it again (docs/search.md)
            queued = set()
            for i in first_fronts(np.array(self.values), REFINE_FRONTS):
                for params in neighbours(self.params[i], self.space):
                    key = _key(params)
                    if key not in self.seen and key not in queued and self.queued < budget and self._mine(key):
                        queued.add(key)
                        self.memory.enqueue_trial(params)
                        self.queued += 1
        if not self.queued:  # alone: nothing is left near the front; with a share, others may add to it
            self.exhausted, self.pause = self.count == 1, SYNC_EVERY

    def queue_first(self, designs: tuple, present: set) -> None:
        """Designs asked before anything else (the plan's), less those the study holds already."""
        for params in designs:
            key = _key(params)
            if key not in present and self._mine(key):
                present.add(key)
                self.memory.enqueue_trial(params)
                self.queued += 1

    def _mine(self, key: tuple) -> bool:
        return self.count == 1 or zlib.crc32(repr(key).encode()) % self.count == self.index

    def asked(self) -> None:
        self.queued = max(0, self.queued - 1)


def _sync(memory: optuna.Study, lease: Lease, mine: set) -> int:
    """Trials the other processes wrote (and, at the start, those of earlier runs) into the sampler,
    each read once; returns the study's completed trials."""
    lease.tally.update()
    new = [t for t in lease.tally.take() if t.user_attrs.get(OWNER_ATTR) not in mine]
    if new:
        memory.add_trials(new)
    return lease.tally.complete


def work(space: SearchSpace, url: str, name: str, n_trials: int, sampler: str = "nsga2", seed: int = 0,
         stop: Callable[[], bool] = lambda: False, on_trial: Callable[[int], None] | None = None,
         share: tuple[int, int] = (0, 1), queue: tuple = ()) -> None:
    """Evaluate designs until the study holds `n_trials` completed trials (see the module docstring).
    `share` (index, count) splits the refinement's neighbours, and the `queue` of designs to write
    first, among local workers."""
    store = storage(url)
    persistent = optuna.load_study(study_name=name, storage=store)
    memory = optuna.create_study(directions=list(DIRECTIONS), sampler=make_sampler(sampler, seed))
    objective, refiner = make_objective(space), _Refiner(memory, space, share)
    if queue:
        refiner.queue_first(queue, {_key(t.params) for t in persistent.get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))})
    lease = Lease(persistent, store, n_trials)
    mine, done, written = set(), 0, 0
    shared = share[1] > 1 or not url.startswith(("sqlite", JOURNAL))  # others may write to the study meanwhile
    try:
        while not stop():
            if lease.left() <= 0:
                book = lease.acquire(stop)
                if book is None:
                    break
                mine.add(lease.number)
                _sync(memory, lease, mine)
                done = book.complete
            if shared and written % SYNC_EVERY == 0:  # what the others found, and how far the study is
                done = _sync(memory, lease, mine)
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
            stop, errors, parent: int, queue: tuple) -> None:
    """A worker process: Ctrl-C goes to the parent, which sets `stop`; a worker whose parent died
    (kill -9, SIGTERM) stops too, even one still starting when it died (the parent's pid is passed
    in, not read here); an InputError goes back as text."""
    ignore_interrupts()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        work(space, url, name, n_trials, sampler, seed, lambda: stop.is_set() or os.getppid() != parent, share=share,
             queue=queue)
    except InputError as err:
        errors.put(str(err))
        raise SystemExit(2) from None


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
    workers = [w for w in workers if w.pid is not None]  # those started (one failing to start stops the rest)
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
               on_trial: Callable[[int], None] | None = None, queue: tuple = ()) -> optuna.Study:
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
            work(space, url, name, n_trials, sampler, seed, stop=interrupted, on_trial=on_trial, queue=queue)
        return persistent
    context = multiprocessing.get_context("spawn")
    stop, errors = context.Event(), context.SimpleQueue()
    seeds = [(seed + i) % 2**32 for i in range(n_workers)]  # numpy's seed range
    workers = [context.Process(target=_worker, args=(space, url, name, n_trials, sampler, s, (i, n_workers), stop,
                                                     errors, os.getpid(), queue)) for i, s in enumerate(seeds) if i]
    try:
        with spawning_quietly():  # a Ctrl-C meanwhile reaches this process after the last start; theirs is ignored
            for w in workers:
                w.start()

        def progress(_done: int) -> None:  # the study's count, all workers together
            if on_trial:
                on_trial(completed(persistent))
        with _interrupt_between_trials() as interrupted:
            work(space, url, name, n_trials, sampler, seeds[0], stop=interrupted, on_trial=progress,
                 share=(0, n_workers), queue=queue)
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
    """Importance of each parameter for throughput (PED-ANOVA: fast, no extra dependency), read from
    the study itself (its leases are FAIL trials, which importance evaluators skip)."""
    if len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))) < 20:
        return {}
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    try:
        with warnings.catch_warnings():  # PED-ANOVA reminds that it ranks low targets; ours is negated
            warnings.simplefilter("ignore", UserWarning)
            return dict(optuna.importance.get_param_importances(study, evaluator=evaluator,
                                                                target=lambda t: -t.values[0]))
    except (ValueError, RuntimeError):  # e.g. a parameter that never varied
        return {}
