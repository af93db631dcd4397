"""Reports of studies: the best configuration, its speed-up, crash counts, figures."""

from __future__ import annotations

from autotune.report._figures import crash_map, optimization_history, trials_frame
from autotune.report._report import (
    StudyReport,
    TrialRow,
    build_report,
    format_report,
    load_study,
)
from autotune.report._studies import StudyInfo, list_studies

__all__ = [
    "StudyInfo",
    "StudyReport",
    "TrialRow",
    "build_report",
    "crash_map",
    "format_report",
    "list_studies",
    "load_study",
    "optimization_history",
    "trials_frame",
]
