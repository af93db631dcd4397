"""The classifier on SGLang logs from public issue threads (``data/issues``), labelled from what
each thread says happened.

The held-out logs are judged only together: they measure how the rules generalise, so none of
them is an example a rule was written for.
"""

from __future__ import annotations

import pytest

from autotune.crashes import CRASH_CATEGORIES, UNKNOWN_CRASH

from ._data import ISSUES, REAL, Labelled, classify_file, labels, raw_lines, reads_as

pytestmark = pytest.mark.timeout(60)

ISSUE_LOGS = labels(ISSUES)
DEV = [item for item in ISSUE_LOGS if item.split == "dev"]
HELD_OUT = [item for item in ISSUE_LOGS if item.split == "held_out"]


def _misses(items: list[Labelled]) -> list[str]:
    out = []
    for item in items:
        verdict = classify_file(item.path)
        if not reads_as(item.category, verdict.category):
            out.append(f"{item.path.name}: {verdict.category}, not {item.category}")
    return out


def test_the_set_is_large_sourced_and_split() -> None:
    assert len(ISSUE_LOGS) >= 30
    assert {item.split for item in ISSUE_LOGS} == {"dev", "held_out"}
    assert len(HELD_OUT) >= 10
    real = ISSUE_LOGS + labels(REAL)  # every crash category in logs users pasted
    assert {item.category for item in real} >= set(CRASH_CATEGORIES) - {UNKNOWN_CRASH}
    with (ISSUES / "LABELS.tsv").open(encoding="utf-8") as f:
        rows = f.read().splitlines()[1:]
    assert all("\thttps://github.com/" in row for row in rows)
    assert sorted(p.name for p in ISSUES.glob("*.log")) == sorted(i.path.name for i in ISSUE_LOGS)


@pytest.mark.parametrize("item", DEV, ids=[item.path.name for item in DEV])
def test_dev_logs_read_as_their_threads_say(item: Labelled) -> None:
    verdict = classify_file(item.path)
    assert reads_as(item.category, verdict.category) and verdict.line_number == item.line
    if item.line is not None:
        assert verdict.evidence is not None
        assert verdict.evidence[:40] in raw_lines(item.path)[item.line - 1]


def test_at_least_95_percent_of_the_issue_logs_and_90_of_the_held_out() -> None:
    misses = _misses(ISSUE_LOGS)
    held_out = _misses(HELD_OUT)
    assert len(misses) <= 0.05 * len(ISSUE_LOGS), misses
    assert len(held_out) <= 0.10 * len(HELD_OUT), held_out
