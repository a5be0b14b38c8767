"""Design-space search: the sole optuna user (docs/search.md).

designs.py turns trials into designs and back; samplers.py holds the samplers (NSGA-II with linear
bookkeeping); studies.py holds the persistent study (a journal file in the run folder by default,
any SQLAlchemy URL such as postgresql+psycopg2://...) and the leases that keep a shared study's
count exact; run.py plans a search (exact, seeded or sampled) and runs one process or several on it.
"""

__all__ = ["CONSTRAINT_NAMES", "INFEASIBLE_VALUES", "evaluate_point", "make_objective", "neighbours",
           "prepare", "suggest_point", "sweep_frame", "trials_frame", "SAMPLERS", "make_sampler", "param_importances",
           "run_search", "work", "DIRECTIONS", "completed", "open_study", "storage", "study_exists"]

from dfvg_dse.search.designs import (CONSTRAINT_NAMES, INFEASIBLE_VALUES, evaluate_point,  # noqa: F401
                                     make_objective, neighbours, prepare, suggest_point, sweep_frame, trials_frame)
from dfvg_dse.search.run import param_importances, run_search, work  # noqa: F401
from dfvg_dse.search.samplers import SAMPLERS, make_sampler  # noqa: F401
from dfvg_dse.search.studies import DIRECTIONS, completed, open_study, storage, study_exists  # noqa: F401
