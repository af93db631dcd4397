"""Print how an engine's crash rules read a folder of labelled logs: the accuracy and every miss.

    python -m tests.crashes.accuracy tests/crashes/data/heldout --engine sglang
    python -m tests.crashes.accuracy tests/engines/vllm/data/heldout --engine vllm

The folder holds ``LABELS.tsv`` (tab-separated, a header row with at least ``file`` and
``category``); ``--split held_out`` keeps only the rows of that split where the file has one. A
row's own ``engine`` column, where the file has one, names the rules that read that log
(``--engine`` is then the default for rows without one).
Exit status 0 whatever the figure (it is a measurement, not a check); 2 when the folder or its
labels cannot be read.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

from autotune import crashes
from autotune.engines import EngineSpec, create_engine

from ._data import reads_as


@dataclass(frozen=True)
class Verdict:
    """One labelled log and what the rules made of it."""

    file: str
    expected: str
    got: str
    evidence: str | None

    @property
    def right(self) -> bool:
        return reads_as(self.expected, self.got)


def read_labels(folder: Path, split: str | None = None) -> list[tuple[Path, str]]:
    """The (log path, expected category) rows of ``folder/LABELS.tsv``."""
    return [(path, category) for path, category, _ in _rows(folder, split)]


def _rows(folder: Path, split: str | None) -> list[tuple[Path, str, str]]:
    with (folder / "LABELS.tsv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [
        (folder / row["file"], row["category"], row.get("engine") or "")
        for row in rows
        if split is None or (row.get("split") or "") == split
    ]


def judge(folder: Path, engine: str, split: str | None = None) -> list[Verdict]:
    """Every labelled log of ``folder`` read by its row's engine's crash rules (``engine``
    where the row names none)."""
    rules: dict[str, crashes.CrashRules] = {}
    out = []
    for path, expected, kind in _rows(folder, split):
        kind = kind or engine
        if kind not in rules:
            rules[kind] = create_engine(EngineSpec(kind=kind)).crash_rules()
        result = crashes.classify_file(path, rules[kind])
        out.append(Verdict(path.name, expected, result.category, result.evidence))
    return out


def report(verdicts: list[Verdict]) -> str:
    """The accuracy line and one line per miss."""
    right = sum(v.right for v in verdicts)
    share = 100.0 * right / len(verdicts) if verdicts else 0.0
    lines = [f"{right}/{len(verdicts)} right ({share:.1f}%)"]
    for v in verdicts:
        if not v.right:
            shown = (v.evidence or "no deciding line")[:100]
            lines.append(f"  miss {v.file}: {v.got}, not {v.expected} ({shown})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.crashes.accuracy")
    parser.add_argument("folder", type=Path, help="a folder with LABELS.tsv and its logs")
    parser.add_argument("--engine", default="sglang", help="sglang or vllm (default sglang)")
    parser.add_argument("--split", default=None, help="only the rows of this split")
    args = parser.parse_args(argv)
    try:
        verdicts = judge(args.folder, args.engine, args.split)
    except (OSError, KeyError) as e:
        print(f"cannot read the labelled logs in {args.folder}: {e}", file=sys.stderr)
        return 2
    print(f"{args.folder} ({args.engine}): {report(verdicts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
