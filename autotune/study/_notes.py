"""Each trial's verdict as its optuna-dashboard note: what a reader of the trial list sees first.

optuna-dashboard's trial list names each trial by number and state only, and its page of a trial
shows the user attributes as some twenty ``key value`` lines, ``outcome`` and ``speedup`` among
them; its note (Markdown, ``optuna_dashboard.save_note``) is shown first. So every finished trial
gets a note of one or two lines:

* a measured trial: ``**ok**: 22.2 output_tok_s, **x0.90** over the baseline``;
* a crash or a time-out: ``**oom_kv_pool** after 0.7 s``, then the log line that decided it and
  what to change;
* a refusal before launch: ``**infeasible**``, then why.

The same figures are the trials table's ``UserAttribute outcome`` and ``UserAttribute speedup``
columns (the Smart Selection page), which list every trial at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from autotune.study._record import Outcome, TrialRecord

if TYPE_CHECKING:
    import optuna

    from autotune.study._verdict import Verdict

log = logging.getLogger("autotune.study")

#: The longest log line quoted in a note (the full line is the ``failure_line`` attribute).
MAX_QUOTED = 300


def trial_note(record: TrialRecord, metric: str) -> str:
    """The note of a finished trial (Markdown)."""
    head = f"**{record.outcome.value}**"
    if record.measured:
        assert record.value is not None
        line = f"{head}: {record.value:.1f} {metric}"
        if record.role == "baseline":
            line += ", the baseline"
        elif record.speedup is not None:
            line += f", **x{record.speedup:.2f}** over the baseline"
        return line + "\n"
    if record.startup_s is not None and record.outcome.crashed:
        head += f" after {record.startup_s:.1f} s"
    lines = [head]
    if record.failure_line and record.outcome is not Outcome.INTERRUPTED:
        lines.append(f"`{_quoted(record.failure_line)}`")
    elif record.failure_line:
        lines.append(_quoted(record.failure_line))
    if record.advice:
        lines.append(_quoted(record.advice))
    return "\n\n".join(lines) + "\n"


def save_trial_note(trial: optuna.Trial, record: TrialRecord, metric: str) -> None:
    """Write :func:`trial_note` as the trial's dashboard note (nothing where optuna-dashboard is
    not installed: a GPU box that carries only what a study needs)."""
    save_note = _note_writer()
    if save_note is not None:
        save_note(trial, trial_note(record, metric))


def _note_writer() -> Any:
    try:
        from optuna_dashboard import save_note
    except ImportError:
        log.debug("optuna-dashboard is not installed: no dashboard notes are written")
        return None
    return save_note


def _quoted(text: str) -> str:
    """``text`` on one line, cut to :data:`MAX_QUOTED`, safe inside a Markdown code span."""
    one = " ".join(text.split()).replace("`", "'")
    return one if len(one) <= MAX_QUOTED else one[: MAX_QUOTED - 3] + "..."


def save_verdict_note(study: optuna.Study, verdict: Verdict) -> None:
    """The confirmation's verdict as the study's dashboard note (shown on the study's page)."""
    save_note = _note_writer()
    if save_note is None:
        return
    head, *rest = verdict.lines()
    body = "\n".join(f"- {line.strip()}" for line in rest)
    save_note(study, f"**{head}**\n\n{body}\n")
