"""A study that measured chosen configurations, for the confirmation's tests.

The space's enqueued configurations (and the baseline) run through the loop of ``autotune study
start`` on in-memory storage, each measured once by the oracle at noise 0, with no search after
them; a confirmation of the study then starts from exactly those measurements.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.searchbench._oracle import Oracle, OracleEvaluator
from autotune.space import SearchSpace
from autotune.study._runner import StudyRunner
from autotune.study._setup import StudyOptions, finish_setup, make_engine, set_target
from autotune.study._storage import StudyPaths


def measured_study(
    space: SearchSpace, oracle: Oracle, tmp_path: Path, name: str, *, informed: bool = True
) -> optuna.Study:
    """``space``'s baseline and enqueued configurations measured by ``oracle`` at noise 0
    (``informed``: SGLang's automatic choice queued too, as the study does by default)."""
    trials = len(space.enqueued) + 1
    study = optuna.create_study(
        study_name=name, storage=optuna.storages.InMemoryStorage(), direction="maximize"
    )
    options = StudyOptions(study_name=name, seed=0, n_trials=trials, progress=False,
                           confirm=False, informed=informed)  # fmt: skip
    engine = make_engine(space)
    finish_setup(study, space, engine, options)
    paths = StudyPaths(name, "in-memory", tmp_path / "artifacts", tmp_path / "logs")
    StudyRunner(
        study, space, engine, paths, options, set_target(study, trials),
        evaluator=OracleEvaluator(oracle, seed=0, noise=0.0), quiet=True,
    ).run()  # fmt: skip
    return study
