"""The labelled logs the crash tests read, and the classifier with SGLang's rules they read
them by."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from autotune import crashes
from autotune.engines.sglang import SGLANG_CRASH_RULES as RULES

DATA = Path(__file__).resolve().parent / "data"
REAL = DATA / "sglang_logs"
UNSEEN = DATA / "unseen"
ISSUES = DATA / "issues"


@dataclass(frozen=True)
class Labelled:
    path: Path
    category: str
    line: int | None  # None: the label file does not say, or nothing decides
    split: str = ""  # issue-thread logs: "dev", or "held_out" (kept out of sight of rule writing)


def labels(folder: Path) -> list[Labelled]:
    with (folder / "LABELS.tsv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    out = []
    for row in rows:
        line = row.get("line") or ""
        number = int(line) if line else None
        out.append(Labelled(folder / row["file"], row["category"], number, row.get("split") or ""))
    return out


def all_logs() -> list[Labelled]:
    return labels(REAL) + labels(UNSEEN) + labels(ISSUES)


def raw_lines(path: Path) -> list[str]:
    """The file's lines as a reader numbers them (split on LF only)."""
    text = path.read_bytes().decode("utf-8", "replace")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def classify_text(text: str, *, alive: bool = False) -> crashes.Classification:
    """The verdict of SGLang's rules on ``text`` (``alive``: its process known to run)."""
    return crashes.classify_text(text, RULES, alive=alive)


def classify_file(path: Path | str) -> crashes.Classification:
    """The verdict of SGLang's rules on the log file at ``path``."""
    return crashes.classify_file(path, RULES)


def new_live() -> crashes.LiveClassifier:
    """A live classifier with SGLang's rules."""
    return crashes.LiveClassifier(RULES)


def reads_as(label: str, got: str) -> bool:
    """The reader's category ``got`` agrees with a thread's ``label``: the same category, or a
    crash the thread blames on no tuned setting (``other_crash``: a bug, an installation) that the
    log does not decide (``unknown_crash``). Neither verdict moves a knob; the reader says
    ``other_crash`` only where a rule names the cause (:data:`autotune.crashes.NOT_A_SETTING`).
    Likewise a healthy start-up (``starting``) whose excerpt shows no start-up step of the
    engine's reads as :data:`~autotune.crashes.UNDECIDED`: neither is a crash, neither moves a
    knob, and the text alone does not say a server is starting."""
    return (
        got == label
        or (label == "other_crash" and got == crashes.UNKNOWN_CRASH)
        or (label == "starting" and got == crashes.UNDECIDED)
    )
