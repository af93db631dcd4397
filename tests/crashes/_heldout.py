"""Held-out sets of real crash logs and the checks both engines' tests run on them.

A held-out set is a folder of real logs from public issue threads with a ``LABELS.tsv`` (file,
category, source_url, note), collected after the rules of its day were written and measured on
them before any rule was changed for it (its ``before`` figure). Each engine's test module names
its sets and the logs its rules were written against; the checks here are the same for all.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from autotune import crashes
from autotune.crashes import CRASH_CATEGORIES, HEALTHY_CATEGORIES, CrashRules

from ._data import reads_as


@dataclass(frozen=True)
class HeldOut:
    """One held-out set: what its misses read as, and how many it reads right."""

    folder: str
    size: int
    misses: dict[str, str]  # file -> what the rules read it as (its label is in LABELS.tsv)
    before: int  # right before any rule was changed for this set: the held-out figure
    now: int


@dataclass(frozen=True)
class HeldOutLogs:
    """One engine's held-out sets under ``data``, read by its ``rules``; ``older``: the text
    of the files that list the logs seen before (their source URLs), none of which a held-out
    set may repeat."""

    data: Path
    rules: CrashRules
    sets: tuple[HeldOut, ...]
    older: str

    def rows(self, held: HeldOut) -> list[dict[str, str]]:
        with (self.data / held.folder / "LABELS.tsv").open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f, delimiter="\t"))

    def cases(self) -> list[tuple[HeldOut, dict[str, str]]]:
        """Every (set, label row), for a parametrised test."""
        return [(s, row) for s in self.sets for row in self.rows(s)]

    def read(self, held: HeldOut, file: str) -> crashes.Classification:
        return crashes.classify_file(self.data / held.folder / file, self.rules)

    def check_set(self, held: HeldOut) -> None:
        """The set is its stated size, every log labelled with a known category from a GitHub
        thread, and no thread is one seen before (in ``older`` or another set)."""
        rows = self.rows(held)
        assert len(rows) == held.size
        files = sorted(p.name for p in (self.data / held.folder).glob("*.log"))
        assert files == sorted(r["file"] for r in rows)
        assert {r["category"] for r in rows} <= set(CRASH_CATEGORIES) | set(HEALTHY_CATEGORIES)
        urls = {r["source_url"] for r in rows}
        assert all(u.startswith("https://github.com/") for u in urls)
        seen = self.older + "".join(
            "\n".join(r["source_url"] for r in self.rows(o)) + "\n"
            for o in self.sets
            if o.folder != held.folder
        )
        # a URL followed by more digits (issues/12 in issues/123) is another thread
        repeated = [u for u in urls if re.search(re.escape(u) + r"(?!\w)", seen)]
        assert not repeated

    def check_log(self, held: HeldOut, row: dict[str, str]) -> None:
        """The log reads as its thread says, or exactly as its listed miss."""
        verdict = self.read(held, row["file"])
        if row["file"] in held.misses:
            assert verdict.category == held.misses[row["file"]], verdict.evidence
            assert not reads_as(row["category"], held.misses[row["file"]])  # a miss is a miss
        else:
            assert reads_as(row["category"], verdict.category), verdict.evidence

    def check_accuracy(self, held: HeldOut) -> None:
        """The set reads right but for its listed misses, and no worse than when held out."""
        rows = self.rows(held)
        right = sum(reads_as(r["category"], self.read(held, r["file"]).category) for r in rows)
        assert right == held.now == len(rows) - len(held.misses)
        assert held.now >= held.before
