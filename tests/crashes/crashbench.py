"""The crash reader's benchmark on labelled real logs: accuracy, accuracy where the deciding line is
in the log, and advice that points the wrong way.

    python -m tests.crashes.crashbench                                   # threads2, dev half
    python -m tests.crashes.crashbench --split held_out                  # the measured half
    python -m tests.crashes.crashbench tests/crashes/data/threads --split all

A folder holds ``LABELS.tsv`` with the columns ``file``, ``engine``, ``category``, ``line`` (the
deciding line, empty when the log does not contain it), ``advice`` (the move that fixes the cause,
``"raise gpu_memory_utilization"``, or ``none``) and ``split``. Each log is read by its row's
engine's rules, with no exit status (what a user pasting an excerpt has). A log is read right when
its category is the label's, or when a crash the thread blames on no tuned setting
(``other_crash``) reads as ``unknown_crash`` (the log does not name that cause; neither verdict
moves a knob): ``tests/crashes/_data.reads_as``.

Advice points the wrong way when the verdict's :attr:`Classification.moves` move a knob against
the label's move (lowers the memory share where raising it cures the cause, or the reverse), move a
memory knob where the cause is not memory (an unsupported kernel, a capture failure that is not an
out-of-memory, NCCL, an argument, a port, a crash of no setting), or turn custom all-reduce off for
an NCCL failure. It is a measurement, not a check: exit status 0 whatever the figures, 2 when the
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

DEFAULT = Path(__file__).resolve().parent / "data" / "threads2"
#: The static memory share, under each engine's name: one knob for direction.
FRACTION = {"mem_fraction_static", "gpu_memory_utilization"}
MEMORY = FRACTION | {
    "cuda_graph_max_bs",
    "max_running_requests",
    "max_num_seqs",
    "chunked_prefill_size",
}
#: Causes that no memory setting cures.
NOT_MEMORY = {
    "unsupported_arch",
    "nccl_error",
    "bad_args",
    "port_in_use",
    "other_crash",
    "unknown_crash",
}


@dataclass(frozen=True)
class Reading:
    """One labelled log and the reader's verdict on it."""

    file: str
    split: str
    expected: str
    got: str
    deciding_line: int | None
    label_advice: str
    moves: tuple[crashes.Move, ...]
    evidence: str | None

    @property
    def right(self) -> bool:
        return reads_as(self.expected, self.got)

    @property
    def wrong_way(self) -> str | None:
        """Why the verdict's advice points the wrong way, or ``None``."""
        return wrong_way(self.expected, self.label_advice, self.moves)


def _same_knob(a: str, b: str) -> bool:
    return a == b or (a in FRACTION and b in FRACTION)


def wrong_way(category: str, label_advice: str, moves: tuple[crashes.Move, ...]) -> str | None:
    """Why ``moves`` point against the label's cause and fix, or ``None`` when they do not."""
    way, _, knob = label_advice.partition(" ")
    opposite = {"raise": "lower", "lower": "raise", "enable": "disable", "disable": "enable"}
    for moved, direction in moves:
        if knob and _same_knob(moved, knob) and opposite.get(way) == direction:
            return f"{direction} {moved}, the fix is {label_advice}"
        if moved in MEMORY and (category in NOT_MEMORY or category == "graph_capture_other"):
            return f"{direction} {moved} for {category}, which memory does not cure"
        if category == "nccl_error" and moved == "custom_all_reduce":
            return f"{direction} custom_all_reduce for an NCCL failure"
        # (for a run-time OOM, more static memory can be right: SGLang's KV slots running out)
        lowering = category == "oom_cuda_graph" and way == "lower"
        same_share = knob in FRACTION and moved in FRACTION
        if lowering and direction == "raise" and moved in MEMORY and not same_share:
            return f"raise {moved} for {category}, the fix is {label_advice}"
    return None


def read(folder: Path, split: str = "dev") -> list[Reading]:
    """Every row of ``folder/LABELS.tsv`` in ``split`` (``all``: every row), read by its engine."""
    with (folder / "LABELS.tsv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    rules: dict[str, crashes.CrashRules] = {}
    out = []
    for row in rows:
        if split != "all" and row.get("split") != split:
            continue
        kind = row.get("engine") or "sglang"
        if kind not in rules:
            rules[kind] = create_engine(EngineSpec(kind=kind)).crash_rules()
        verdict = crashes.classify_file(folder / row["file"], rules[kind])
        line = row.get("line") or ""
        out.append(
            Reading(
                file=row["file"],
                split=row.get("split") or "",
                expected=row["category"],
                got=verdict.category,
                deciding_line=int(line) if line else None,
                label_advice=row.get("advice") or "none",
                moves=verdict.moves,
                evidence=verdict.evidence,
            )
        )
    return out


def _share(right: int, total: int) -> str:
    return f"{right}/{total} ({100.0 * right / total:.1f}%)" if total else "0/0"


def report(readings: list[Reading]) -> str:
    """The three figures, then every miss and every wrong-way advice."""
    decided = [r for r in readings if r.deciding_line is not None]
    wrong = [r for r in readings if r.wrong_way]
    lines = [
        "logs read right:                       "
        + _share(sum(r.right for r in readings), len(readings)),
        "logs with a deciding line, read right: "
        + _share(sum(r.right for r in decided), len(decided)),
        f"advice pointing the wrong way:         {len(wrong)}",
    ]
    for r in readings:
        if not r.right:
            where = f"l.{r.deciding_line}" if r.deciding_line else "no deciding line"
            shown = (r.evidence or "-")[:90]
            lines.append(f"  miss {r.file}: {r.got}, not {r.expected} ({where}; read: {shown})")
    for r in wrong:
        lines.append(f"  wrong way {r.file}: {r.wrong_way}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.crashes.crashbench")
    parser.add_argument("folder", type=Path, nargs="?", default=DEFAULT)
    parser.add_argument("--split", default="dev", help="dev, held_out or all (default dev)")
    args = parser.parse_args(argv)
    try:
        readings = read(args.folder, args.split)
    except (OSError, KeyError, ValueError) as e:
        print(f"cannot read the labelled logs in {args.folder}: {e}", file=sys.stderr)
        return 2
    print(f"{args.folder} [{args.split}]")
    print(report(readings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
