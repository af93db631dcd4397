"""The search-efficiency benchmark: strategies compared in GPU hours on the simulator's model.

Each study runs the tuner's own loop (``autotune study start``) with the simulator's model as its
trial evaluator (:class:`OracleEvaluator`), on in-memory storage.
"""

from __future__ import annotations

from autotune.searchbench._benchmark import (
    SearchBenchResult,
    format_table,
    run_search_benchmark,
    write_outputs,
)
from autotune.searchbench._bookkeeping import (
    StrategySummary,
    StudyScore,
    StudyTrace,
    TrialTrace,
    score_study,
    summarise,
    trace_of,
)
from autotune.searchbench._optimum import Optimum, find_optimum, grid
from autotune.searchbench._oracle import Answer, Oracle, OracleEvaluator
from autotune.searchbench._strategies import ABLATIONS, PLANS, STRATEGIES, Plan, run_study

__all__ = [
    "ABLATIONS",
    "PLANS",
    "STRATEGIES",
    "Answer",
    "Optimum",
    "Oracle",
    "OracleEvaluator",
    "Plan",
    "SearchBenchResult",
    "StrategySummary",
    "StudyScore",
    "StudyTrace",
    "TrialTrace",
    "find_optimum",
    "format_table",
    "grid",
    "run_search_benchmark",
    "run_study",
    "score_study",
    "summarise",
    "trace_of",
    "write_outputs",
]
