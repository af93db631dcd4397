"""Tables of a study's report: the best trials with their knobs, and the failures by category.

A :class:`Table` prints as aligned text and renders as a Markdown table in Jupyter (the review
notebook shows them that way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.report._report import StudyReport, TrialRow
from autotune.study._record import Outcome

#: Knobs shown first, in this order; any other knob of a trial follows in the order it has.
_KNOB_ORDER = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "cuda_graph_max_bs",
    "mem_fraction_static",
    "allreduce",
)


@dataclass(frozen=True)
class Table:
    """Rows of cells under named columns."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def to_markdown(self) -> str:
        def cell(text: str) -> str:
            return text.replace("|", "\\|") or " "

        lines = [f"**{self.title}**", ""]
        lines.append("| " + " | ".join(cell(c) for c in self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows]
        if not self.rows:
            lines.append("| " + " | ".join(["-"] * len(self.columns)) + " |")
        return "\n".join(lines)

    def to_text(self) -> str:
        widths = [
            max([len(c), *(len(row[i]) for row in self.rows)]) for i, c in enumerate(self.columns)
        ]
        lines = [self.title]
        lines.append("  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=True)))
        for row in self.rows:
            lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
        if not self.rows:
            lines.append("(none)")
        return "\n".join(line.rstrip() for line in lines)

    def __str__(self) -> str:
        return self.to_text()

    def _repr_markdown_(self) -> str:
        return self.to_markdown()


def best_trials_table(report: StudyReport, n: int = 10) -> Table:
    """The ``n`` best measured trials, best first: objective, speed-up, acceptance, knobs."""
    rows = report.top(n)
    knobs = _knob_names(rows)
    columns = ("trial", "role", report.metric, "speed-up", "accept length", *knobs)
    cells = tuple(
        (
            str(r.number),
            r.role,
            _fmt(r.value),
            "" if r.speedup is None else f"x{r.speedup:.2f}",
            "" if r.accept_length is None else f"{r.accept_length:.2f}",
            *(_fmt(r.config.get(k)) for k in knobs),
        )
        for r in rows
    )
    title = f"{report.study_name}: the {len(rows)} best measured trials ({report.direction})"
    return Table(title, columns, cells)


def crash_table(report: StudyReport) -> Table:
    """Finished trials that were not measured, by outcome: how many, which, what to do, and the
    evidence (the log line that decided a crash, or why a configuration was refused)."""
    groups: dict[Outcome, list[TrialRow]] = {}
    for row in report.rows:
        if not row.measured:
            groups.setdefault(row.outcome, []).append(row)
    cells = []
    for outcome, rows in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        numbers = ", ".join(str(r.number) for r in rows)
        advice = next((r.advice for r in rows if r.advice), None)
        line = next((r.failure_line for r in rows if r.failure_line), None)
        cells.append((outcome.value, str(len(rows)), numbers, advice or "", line or ""))
    columns = ("outcome", "trials", "trial numbers", "what to do", "evidence")
    return Table(f"{report.study_name}: trials that were not measured", columns, tuple(cells))


def _knob_names(rows: Sequence[TrialRow]) -> list[str]:
    seen: list[str] = []
    for row in rows:
        seen += [k for k in row.config if k not in seen]
    ordered = [k for k in _KNOB_ORDER if k in seen]
    return ordered + [k for k in seen if k not in ordered]


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value)
