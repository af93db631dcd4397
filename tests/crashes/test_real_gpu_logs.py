"""Logs with CUDA out-of-memory messages produced by a real GPU."""

from __future__ import annotations

from pathlib import Path

from ._data import classify_file, new_live

DATA = Path(__file__).parent / "data" / "real_gpu"


def test_graph_capture_oom_on_an_h200_is_a_graph_oom() -> None:
    path = DATA / "h200_graph_capture_oom.log"
    verdict = classify_file(path)
    assert verdict.category == "oom_cuda_graph"
    assert verdict.evidence is not None
    assert verdict.evidence.startswith("Exception: Capture cuda graph failed: CUDA out of memory")
    assert "cuda-graph-max-bs" in verdict.advice


def test_the_live_classifier_decides_at_the_capture_line() -> None:
    lines = (DATA / "h200_graph_capture_oom.log").read_text().splitlines()
    live = new_live()
    decided = None
    for number, line in enumerate(lines, start=1):
        if live.feed(line) is not None:
            decided = number
            break
    assert decided is not None
    assert "Capture cuda graph failed" in lines[decided - 1]
