"""The search's samplers (docs/search.md, "Sampler"): Optuna's, with NSGA-II's generation bookkeeping
kept linear in trials.

Optuna's genetic samplers find a new trial's generation by reading every completed trial again,
and a generation's population and parents by filtering every trial again, so a study of n trials
costs O(n^2) in bookkeeping alone (issue 16: 0.97 s at 500 trials, 23.6 s at 4,000). `LinearNSGAII`
keeps the same rules (a generation holds `population_size` completed trials; its parents are the
elite of the previous generation and its parents; the relative search space is the intersection of
the completed trials' distributions) through the sampler's public extension points, reading each
finished trial once; parents are cached in the sampler, not in the study's system
attributes (every process samples in its own memory study: search/run.py).
"""

from __future__ import annotations

from collections import defaultdict

import optuna
from optuna.trial import FrozenTrial, TrialState

from dfvg_dse.specs import InputError

SAMPLERS = ("nsga2", "tpe", "random", "qmc")


def finished_since(study: optuna.Study, start: int) -> list[FrozenTrial]:
    """The study's trials from position `start` up to its first unfinished one: a reader that keeps
    its position reads each finished trial once (trials finish in the order they are asked here)."""
    trials = study.get_trials(deepcopy=False)  # a list of references: no trial is copied
    end = start
    while end < len(trials) and trials[end].state.is_finished():
        end += 1
    return trials[start:end]


class _Generations:
    """Completed trials by generation, from one pass over a study's trials as they finish."""

    def __init__(self, study_id: int):
        self.study_id = study_id
        self.scanned = 0  # trials before this index are finished and counted
        self.members: dict[int, list[FrozenTrial]] = defaultdict(list)
        self.space: dict | None = None  # distributions every completed trial shares (Optuna's intersection)

    def update(self, study: optuna.Study, key: str) -> None:
        for trial in finished_since(study, self.scanned):
            generation = trial.system_attrs.get(key, -1)
            if trial.state == TrialState.COMPLETE:
                if generation >= 0:
                    self.members[generation].append(trial)
                self.space = dict(trial.distributions) if self.space is None else {
                    name: d for name, d in self.space.items() if trial.distributions.get(name) == d}
            self.scanned += 1

    def current(self, population_size: int) -> int:
        """The generation a new trial joins: the latest, or the next once the latest is full."""
        latest = max(self.members, default=0)
        return latest + 1 if len(self.members.get(latest, ())) >= population_size else latest


class LinearNSGAII(optuna.samplers.NSGAIISampler):
    """NSGA-II with the same generations and parents as Optuna's, in linear time (module docstring)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._book: _Generations | None = None
        self._parents: dict[int, list[FrozenTrial]] = {}

    def _generations(self, study: optuna.Study) -> _Generations:
        if self._book is None or self._book.study_id != study._study_id:
            self._book, self._parents = _Generations(study._study_id), {}
        self._book.update(study, self._get_generation_key())
        return self._book

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict:
        """The parameters every completed trial has, with one distribution, less those with a single
        choice (as NSGAIISampler's IntersectionSearchSpace, from the same one pass over the trials)."""
        space = self._generations(study).space or {}
        return {name: space[name] for name in sorted(space) if not space[name].single()}

    def get_trial_generation(self, study: optuna.Study, trial: FrozenTrial) -> int:
        generation = trial.system_attrs.get(self._get_generation_key())
        if generation is not None:
            return generation
        generation = self._generations(study).current(self.population_size)
        study._storage.set_trial_system_attr(trial._trial_id, self._get_generation_key(), generation)
        return generation

    def get_population(self, study: optuna.Study, generation: int) -> list[FrozenTrial]:
        return list(self._generations(study).members.get(generation, ()))

    def get_parent_population(self, study: optuna.Study, generation: int) -> list[FrozenTrial]:
        if generation == 0:
            return []
        self._generations(study)
        if generation in self._parents:
            return self._parents[generation]
        parents = self.select_parent(study, generation)
        # kept in trial order, as Optuna reads a cached parent list back from its study (the elite order is
        # seen once): the same lists give the same children, trial for trial, as NSGAIISampler's
        self._parents[generation] = sorted(parents, key=lambda t: t.number)
        return parents


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "nsga2":
        return LinearNSGAII(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed)
    raise InputError(f"--sampler {name!r}: allowed: {', '.join(SAMPLERS)}")
