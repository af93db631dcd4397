"""A rule set built from an engine's rule module: the shared line questions, its own words."""

from __future__ import annotations

import re

from autotune.crashes import CAUSE_PRIORITY, LineMarks, classify_text
from autotune.engines.sglang import SGLANG_CRASH_RULES
from autotune.engines.vllm import VLLM_CRASH_RULES

MARKS = LineMarks(
    trigger=re.compile(r"boom|fail"), noise=(" HARMLESS ",), strong=re.compile(r"^dying$")
)


def test_line_marks_answer_by_the_words_given() -> None:
    assert MARKS.may_matter("A BOOM here") and not MARKS.may_matter("all quiet")
    assert MARKS.is_noise("x HARMLESS y") and not MARKS.is_noise("HARMLESS")
    assert MARKS.is_strong_crash("dying") and not MARKS.is_strong_crash("not dying")
    for line in ("WARNING: x", "[W1014 11:00] y", "W1118 10:23 z", "UserWarning: w", "NCCL WARN q"):
        assert MARKS.is_warning(line), line
    assert not MARKS.is_warning("Warnings are off") and not MARKS.is_warning("ERROR: x")


def test_each_engine_reads_its_own_words() -> None:
    sglang_ready = "The server is fired up and ready to roll!"
    assert SGLANG_CRASH_RULES.may_matter(sglang_ready)
    assert not VLLM_CRASH_RULES.may_matter(sglang_ready)
    assert VLLM_CRASH_RULES.is_strong_crash("RuntimeError: Engine core initialization failed.")
    assert not SGLANG_CRASH_RULES.is_strong_crash("Engine core initialization failed.")
    assert SGLANG_CRASH_RULES.is_noise("Using a slow tokenizer. This might cause a slowdown.")
    assert SGLANG_CRASH_RULES.cause_priority == VLLM_CRASH_RULES.cause_priority == CAUSE_PRIORITY


def test_sglang_decides_a_pool_of_no_tokens_at_warning_level() -> None:
    line = "[2026-01-01 10:00:00 TP0] WARNING: max_total_num_tokens=-3270"
    assert VLLM_CRASH_RULES.is_warning(line)
    assert not SGLANG_CRASH_RULES.is_warning(line)
    assert SGLANG_CRASH_RULES.is_warning("[2026-01-01 10:00:00 TP0] WARNING: slow disk")
    assert classify_text(line + "\n", SGLANG_CRASH_RULES).category == "oom_kv_pool"
