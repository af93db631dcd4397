"""The search-efficiency benchmark: strategies compared in GPU hours on the simulator's model."""

from __future__ import annotations

from autotune.searchbench._benchmark import (
    SearchBenchResult,
    format_table,
    run_search_benchmark,
    write_outputs,
)
from autotune.searchbench._bookkeeping import StrategySummary, StudyScore, score_study, summarise
from autotune.searchbench._optimum import Optimum, find_optimum, grid
from autotune.searchbench._oracle import Answer, Oracle
from autotune.searchbench._studies import (
    ABLATIONS,
    STRATEGIES,
    StudySimulator,
    StudyTrace,
    TrialTrace,
)

__all__ = [
    "ABLATIONS",
    "STRATEGIES",
    "Answer",
    "Optimum",
    "Oracle",
    "SearchBenchResult",
    "StrategySummary",
    "StudyScore",
    "StudySimulator",
    "StudyTrace",
    "TrialTrace",
    "find_optimum",
    "format_table",
    "grid",
    "run_search_benchmark",
    "score_study",
    "summarise",
    "write_outputs",
]
