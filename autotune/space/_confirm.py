"""The ``confirm`` section of a space: how the best candidates are re-measured after the search.

A search ranks configurations by single measurements, and on a box where the whole gain is a
few per cent a lucky run decides the ranking. Confirmation re-measures the best few candidates
and the no-speculation baseline interleaved (baseline, A, B, C, then again, so drift between
rounds hits all alike) until each candidate's ratio to the baseline has a confidence interval
that separates it from the others, or every candidate is slower than the baseline (none is
chosen), or the rounds run out. See :mod:`autotune.study._confirm`.

.. code-block:: yaml

    confirm:
      candidates: 3      # the best measured configurations taken (distinct ones)
      min_rounds: 3      # rounds before anything is decided
      max_rounds: 10     # the budget: at most this many starts of each configuration
      confidence: 0.95   # family-wise, over the candidates and the rounds it may stop at
      margin: 0.01       # ratios closer than this count as equal

``confirm: false`` turns it off (``autotune study confirm`` still runs it on demand).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune._document import Section


@dataclass(frozen=True)
class ConfirmSpec:
    """How a study confirms its best configurations (see the module docstring)."""

    enabled: bool = True
    candidates: int = 3
    min_rounds: int = 3
    max_rounds: int = 10
    confidence: float = 0.95
    margin: float = 0.01

    def describe(self) -> str:
        if not self.enabled:
            return "off (run `autotune study confirm` to confirm on demand)"
        return (
            f"the best {self.candidates} and the baseline, interleaved, "
            f"{self.min_rounds} to {self.max_rounds} rounds, {self.confidence:.0%} confidence, "
            f"ratios within {self.margin:.1%} equal"
        )


def parse_confirm(root: Section) -> ConfirmSpec:
    """Read the space's ``confirm`` section (absent: on, with the defaults)."""
    raw = root.get("confirm")
    if raw is None:
        return ConfirmSpec()
    if isinstance(raw, bool):
        return ConfirmSpec(enabled=raw)
    sec = root.section("confirm")
    sec.check_keys(("enabled", "candidates", "min_rounds", "max_rounds", "confidence", "margin"))
    default = ConfirmSpec()
    enabled = sec.boolean("enabled", True)
    candidates = sec.integer("candidates", default.candidates, minimum=1)
    low = sec.integer("min_rounds", default.min_rounds, minimum=2)
    high = sec.integer("max_rounds", max(default.max_rounds, low), minimum=2)
    if high < low:
        raise sec.error(
            f"max_rounds ({high}) is below min_rounds ({low})",
            "max_rounds",
            hint="max_rounds is the budget: at least min_rounds",
        )
    confidence = sec.number("confidence", default.confidence, minimum=0.5, maximum=0.999)
    margin = sec.number("margin", default.margin, maximum=0.5)
    return ConfirmSpec(enabled, candidates, low, high, float(confidence), float(margin))
