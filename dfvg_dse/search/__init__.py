"""Design-space search: the sole optuna user (docs/search.md).

designs.py turns trials into designs and back; studies.py holds the persistent study (an RDB
storage: SQLite in the run folder by default, any SQLAlchemy URL such as postgresql+psycopg2://...)
and the leases that keep a shared study's count exact; run.py runs one process or several on it.
"""

__all__ = ["CONSTRAINT_NAMES", "INFEASIBLE_VALUES", "OBJECTIVE_NAMES", "evaluate_point", "make_objective", "neighbours",
           "prepare", "suggest_point", "sweep_frame", "trials_frame", "SAMPLERS", "make_sampler", "param_importances",
           "run_search", "work", "DIRECTIONS", "completed", "open_study", "storage", "study_exists"]

from dfvg_dse.search.designs import (CONSTRAINT_NAMES, INFEASIBLE_VALUES, OBJECTIVE_NAMES, evaluate_point,  # noqa: F401
                                     make_objective, neighbours, prepare, suggest_point, sweep_frame, trials_frame)
from dfvg_dse.search.run import SAMPLERS, make_sampler, param_importances, run_search, work  # noqa: F401
from dfvg_dse.search.studies import DIRECTIONS, completed, open_study, storage, study_exists  # noqa: F401
