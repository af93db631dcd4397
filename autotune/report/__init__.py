"""Reports of studies: the best configuration, its speed-up, crash counts, tables and figures."""

from __future__ import annotations

from autotune.report._figures import crash_map, optimization_history, trials_frame
from autotune.report._loads import CurveRow, LoadReport, LoadWinner, Schedule, format_loads
from autotune.report._report import (
    StudyReport,
    TrialRow,
    build_report,
    format_report,
    load_study,
)
from autotune.report._studies import StudyInfo, list_studies
from autotune.report._tables import Table, best_trials_table, crash_table

__all__ = [
    "CurveRow",
    "LoadReport",
    "LoadWinner",
    "Schedule",
    "StudyInfo",
    "StudyReport",
    "Table",
    "TrialRow",
    "best_trials_table",
    "build_report",
    "crash_map",
    "crash_table",
    "format_loads",
    "format_report",
    "list_studies",
    "load_study",
    "optimization_history",
    "trials_frame",
]
