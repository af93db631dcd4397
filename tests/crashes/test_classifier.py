"""The crash classifier on real and unseen SGLang logs, whole and line by line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune import ConfigError
from autotune.crashes import (
    CRASH_CATEGORIES,
    HEALTHY_CATEGORIES,
    UNDECIDED,
    UNKNOWN_CRASH,
    Classification,
    LiveClassifier,
)

from ._data import (
    REAL,
    UNSEEN,
    Labelled,
    all_logs,
    classify_file,
    classify_text,
    labels,
    new_live,
    raw_lines,
    reads_as,
)

pytestmark = pytest.mark.timeout(60)

# The line of each real log that carries its cause (the exception line, not the generic header).
REAL_DECIDING_LINE = {
    "02_oom_cuda_graph.log": 18,
    "04_graph_capture_other.log": 1,
    "05_oom_kv_pool.log": 14,
    "06_unsupported_arch.log": 15,
    "07_decode_progress.log": 6,
    "08_nccl_error.log": 39,
    "09_ready.log": 11,
    "14_bad_args.log": 34,
    "15_oom_runtime.log": 42,
    "20_other_crash.log": 40,
}


def _ids(items: list[Labelled]) -> list[str]:
    return [item.path.name for item in items]


def _live(path: Path) -> tuple[LiveClassifier, int | None]:
    """Feed ``path`` line by line; also return the line at which feed() first decided."""
    live = new_live()
    first: int | None = None
    for number, line in enumerate(raw_lines(path), start=1):
        if live.feed(line) is not None and first is None:
            first = number
    return live, first


@pytest.mark.parametrize("item", labels(REAL), ids=_ids(labels(REAL)))
def test_real_logs_are_labelled_as_their_labels_say(item: Labelled) -> None:
    result = classify_file(item.path)
    assert result.category == item.category
    assert result.line_number == REAL_DECIDING_LINE[item.path.name]
    assert result.evidence is not None
    assert result.evidence[:40] in raw_lines(item.path)[result.line_number - 1]


@pytest.mark.parametrize("item", labels(UNSEEN), ids=_ids(labels(UNSEEN)))
def test_unseen_logs_are_labelled_as_their_labels_say(item: Labelled) -> None:
    result = classify_file(item.path)
    assert reads_as(item.category, result.category) and result.line_number == item.line
    if item.line is not None:
        assert result.evidence is not None
        assert result.evidence[:40] in raw_lines(item.path)[item.line - 1]


def test_unseen_logs_cover_every_category() -> None:
    unseen = labels(UNSEEN)
    assert len(unseen) >= 20
    # (unknown_crash is the reader's honest answer, not a cause a thread reports)
    expected = set(CRASH_CATEGORIES) - {UNKNOWN_CRASH}
    assert {item.category for item in unseen} == expected | set(HEALTHY_CATEGORIES)


@pytest.mark.parametrize("item", all_logs(), ids=_ids(all_logs()))
def test_live_text_and_file_agree(item: Labelled) -> None:
    live, _ = _live(item.path)
    text = item.path.read_bytes().decode("utf-8", "replace")
    from_file = classify_file(item.path)
    assert live.finish() == classify_text(text) == from_file
    assert live.state == from_file.category
    assert from_file.is_crash == (from_file.category in CRASH_CATEGORIES)


@pytest.mark.parametrize("item", all_logs(), ids=_ids(all_logs()))
def test_evidence_is_short_and_printable(item: Labelled) -> None:
    result = classify_file(item.path)
    if result.evidence is not None:
        assert len(result.evidence) <= 500
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", result.evidence)
        assert not result.evidence.startswith(("sglang-1", "0: ", "[pod/", "2026-"))
    assert result.advice


@pytest.mark.parametrize(
    ("name", "decides_at"),
    [
        ("05_oom_kv_pool.log", 14),
        ("02_oom_cuda_graph.log", 18),
        ("06_unsupported_arch.log", 15),
        ("08_nccl_error.log", 39),
        ("14_bad_args.log", 34),
        ("15_oom_runtime.log", 42),
    ],
)
def test_live_decides_at_the_cause_not_at_the_generic_header(name: str, decides_at: int) -> None:
    live, first = _live(REAL / name)
    assert first == decides_at
    assert live.finish().line_number == decides_at


@pytest.mark.parametrize(
    ("name", "decides_at", "category"),
    [
        ("u01_kv_pool_docker_current_value.log", 42, "oom_kv_pool"),
        ("u03_eagle_draft_graph_oom.log", 25, "oom_cuda_graph"),
        ("u06_graph_oom_ranks_interleaved.log", 32, "oom_cuda_graph"),
        ("u09_argparse_ambiguous.log", 6, "bad_args"),
        ("u13_nccl_watchdog_timeout.log", 4, "nccl_error"),
        ("u21_flashinfer_fusion_sm120_chained.log", 16, "graph_capture_other"),
    ],
)
def test_live_decides_unseen_logs_at_their_cause(name: str, decides_at: int, category: str) -> None:
    live = new_live()
    for number, line in enumerate(raw_lines(UNSEEN / name), start=1):
        verdict = live.feed(line)
        if verdict is not None:
            assert (number, verdict.category) == (decides_at, category)
            assert verdict.is_crash
            break
    else:
        pytest.fail("no line decided")


def test_generic_scheduler_exception_is_remembered_but_not_decisive() -> None:
    lines = raw_lines(REAL / "05_oom_kv_pool.log")
    live = new_live()
    assert live.state == "starting"
    assert "Scheduler hit an exception" in lines[0]
    assert live.feed(lines[0]) is None
    assert live.state == "unknown_crash"  # a crash, cause not yet known
    for line in lines[1:13]:
        assert live.feed(line) is None
    # the unfinished traceback is inside init_memory_pool: a provisional verdict, not a decision
    assert live.state == "oom_kv_pool"
    verdict = live.feed(lines[13])
    assert verdict is not None and verdict.category == "oom_kv_pool"
    assert live.finish().category == "oom_kv_pool"


def test_finish_prefers_the_specific_cause_over_generic_lines_around_it() -> None:
    live, first = _live(REAL / "08_nccl_error.log")
    result = live.finish()
    # NCCL WARN, "Scheduler hit an exception" and the sigquit line come before and after it
    assert (result.category, result.line_number, first) == ("nccl_error", 39, 39)


def test_states_follow_a_healthy_start() -> None:
    live = new_live()
    assert live.feed("[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB") is None
    assert live.state == "starting"
    assert live.feed("[2026-01-01 10:05:00] The server is fired up and ready to roll!") is None
    assert live.state == "ready"
    live.feed(
        "[2026-01-01 10:05:09 TP0] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, "
        "accept len: 2.10, accept rate: 0.55, cuda graph: True, gen throughput (token/s): 80.1, "
    )
    assert live.state == "running"
    assert live.lines_seen == 3
    assert not live.finish().is_crash


def test_a_crash_after_the_ready_line_wins() -> None:
    result = classify_file(UNSEEN / "u19_oom_after_ready.log")
    assert result.category == "oom_runtime"
    assert raw_lines(UNSEEN / "u19_oom_after_ready.log")[0].endswith("ready to roll!")


def test_a_traceback_followed_by_the_ready_line_was_not_fatal() -> None:
    crash = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/utils/common.py", line 88, '
        "in <module>\n"
        "    import vllm\n"
        "ModuleNotFoundError: No module named 'vllm'\n"
    )
    assert classify_text(crash).category == "unknown_crash"
    healthy = crash + "[2026-01-01 10:05:00] The server is fired up and ready to roll!\n"
    assert classify_text(healthy).category == "ready"


def test_warnings_that_look_like_errors_decide_nothing() -> None:
    text = "\n".join(
        [
            "/opt/sglang/srt/utils/hf_transformers_utils.py:558: UserWarning: Using a slow "
            "tokenizer. This might cause a significant slowdown.",
            "  warnings.warn(",
            "gpu01:7711:7960 [0] NCCL INFO Channel 00/02 :    0   1",
            "gpu01:7711:7960 [0] NCCL WARN NET/Plugin : No plugin found (libnccl-net.so)",
            "[W1014 11:00:24.551 ProcessGroupNCCL.cpp:4751] Warning: An unbatched P2P op was "
            "called on this ProcessGroup.",
            "[2025-02-12 02:56:48 TP0] Compute capability below sm80. Use float16 due to lack of "
            "bfloat16 support.",
            "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB",
        ]
    )
    result = classify_text(text)
    assert (result.category, result.evidence, result.line_number) == ("starting", None, None)


def test_a_plain_oom_then_the_newer_capture_failed_line_is_a_graph_oom() -> None:
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "CUDA graph capture failed.\n"
    )
    result = classify_text(text)
    assert (result.category, result.line_number) == ("oom_cuda_graph", 1)


def test_oom_during_the_capture_phase_is_a_graph_oom_even_without_frames() -> None:
    text = (
        "[2026-01-01 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
        "[2026-01-01 10:00:05 TP3] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "64.00 MiB.\n"
    )
    assert classify_text(text).category == "oom_cuda_graph"
    after = text.replace("begin. This can take up to several minutes.", "end. Time elapsed: 5 s.")
    assert classify_text(after).category == "oom_runtime"


def test_host_memory_and_model_architecture_are_not_gpu_problems() -> None:
    host = classify_text(
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough "
        "memory: you tried to allocate 34359738368 bytes.\n"
    )
    assert host.category == "other_crash"
    model = classify_text(
        "ValueError: Model architectures ['FooForCausalLM'] are not supported for now.\n"
    )
    assert model.category == "other_crash"


def test_feed_counts_every_line_of_a_chunk() -> None:
    live = new_live()
    chunk = "\n".join(raw_lines(REAL / "05_oom_kv_pool.log")) + "\n"
    verdict = live.feed(chunk)
    assert verdict is not None
    assert (verdict.category, verdict.line_number) == ("oom_kv_pool", 14)
    assert live.lines_seen == 14


def test_crlf_and_lf_logs_read_the_same() -> None:
    for item in labels(REAL):
        text = item.path.read_text(encoding="utf-8")
        assert classify_text(text.replace("\n", "\r\n")) == classify_text(text)


def test_long_lines_and_binary_junk() -> None:
    junk = "".join(chr(c) for c in range(32) if c != 10) + "\ufffd\x7f" * 50
    kv = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    text = "x" * 200_000 + "\n" + junk + "\n" + ("y" * 100_000) + " " + kv + "\n"
    result = classify_text(text)
    assert (result.category, result.line_number) == ("oom_kv_pool", 3)
    assert result.evidence is not None and len(result.evidence) <= 500
    assert "Not enough memory" in result.evidence


def test_a_file_with_one_endless_line(tmp_path: Path) -> None:
    log = tmp_path / "endless.log"
    log.write_bytes(b"\x00\xff" * 600_000 + b" The server is fired up and ready to roll!")
    result = classify_file(log)
    assert (result.category, result.line_number) == ("ready", 1)


def test_empty_log_is_undecided_unless_its_process_runs(tmp_path: Path) -> None:
    log = tmp_path / "empty.log"
    log.write_bytes(b"")
    assert classify_file(log) == classify_text("")
    assert classify_text("").category == UNDECIDED
    assert classify_text("", alive=True).category == "starting"


def test_missing_file_and_directory_raise_config_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    with pytest.raises(ConfigError) as e:
        classify_file(missing)
    assert str(missing) in str(e.value) and "not found" in str(e.value)
    assert e.value.hint
    with pytest.raises(ConfigError) as e:
        classify_file(tmp_path)
    assert "directory" in str(e.value)


def test_classification_to_dict() -> None:
    result = Classification("oom_kv_pool", "RuntimeError: Not enough memory.", 3, "raise it")
    assert result.to_dict() == {
        "category": "oom_kv_pool",
        "evidence": "RuntimeError: Not enough memory.",
        "line_number": 3,
        "advice": "raise it",
        "moves": [],
        "is_crash": True,
        "exit_code": None,
    }
    assert not Classification("ready", None, None, "ok").is_crash


def test_source_lines_pasted_without_indentation_are_code_not_causes() -> None:
    text = "\n".join(
        [
            'File "/sgl-workspace/sglang/python/sglang/srt/distributed/pynccl_wrapper.py", line '
            "350, in NCCL_CHECK",
            'raise RuntimeError(f"NCCL error: {error_str}")',
            "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO)",
        ]
    )
    result = classify_text(text + "\n")
    assert (result.category, result.line_number) == ("nccl_error", 3)
    # not under a frame, the same text is a log line like any other
    assert new_live().feed('raise RuntimeError(f"NCCL error: {error_str}")') is not None


def test_a_crash_written_onto_a_progress_line_is_still_a_crash() -> None:
    line = (
        "Capturing batches (bs=64 avail_mem=11.08 GB): 0%| | 0/11 [00:00<?, ?it/s] "
        "[2025-09-18 03:27:45 DP1 TP0] Scheduler hit an exception: Traceback (most recent call "
        "last):"
    )
    assert classify_text(line + "\n").category == "unknown_crash"
    bar = "Capturing batches (bs=64 avail_mem=11.08 GB): 0%| | 0/11 [00:00<?, ?it/s]"
    assert classify_text(bar + "\n").category == "starting"
