"""Studies: the tuning loop, its storage, its sampler and the trial record.

``start_study`` creates a study from a search space and runs it; ``resume_study`` continues one
after a crash, a reboot or Ctrl-C. Everything lands in an Optuna RDB storage (SQLite by default)
with server logs and raw benchmark results as artifacts, for optuna-dashboard and the report.
"""

from __future__ import annotations

from autotune.study._choice import SAMPLERS, SamplerChoice, build_sampler, choose_sampler
from autotune.study._record import (
    CRASH_OUTCOMES,
    Outcome,
    TrialRecord,
    best_feasible_trial,
    feasible_trials,
    within_limits,
)
from autotune.study._runner import StudySummary, confirm_study, resume_study, start_study
from autotune.study._sampler import AutotuneSampler
from autotune.study._setup import StudyOptions
from autotune.study._storage import StudyPaths, open_storage, study_paths

__all__ = [
    "CRASH_OUTCOMES",
    "SAMPLERS",
    "AutotuneSampler",
    "Outcome",
    "SamplerChoice",
    "StudyOptions",
    "StudyPaths",
    "StudySummary",
    "TrialRecord",
    "best_feasible_trial",
    "build_sampler",
    "choose_sampler",
    "confirm_study",
    "feasible_trials",
    "open_storage",
    "resume_study",
    "start_study",
    "study_paths",
    "within_limits",
]
