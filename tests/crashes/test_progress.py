"""Healthy progress lines and the settings a log shows."""

from __future__ import annotations

from autotune.engines.sglang import _crashes as progress
from autotune.engines.sglang._crashes import SGLANG_CRASH_RULES


def test_progress_markers_and_values() -> None:
    assert progress.is_ready("[x] The server is fired up and ready to roll!")
    assert progress.is_running("Decode batch. #running-req: 1")
    assert progress.is_running("Prefill batch, #new-seq: 1")
    assert progress.capture_begin("Capture draft cuda graph begin. This can take up") == "draft"
    assert progress.capture_begin("Capture cuda graph begin. This can take up") == "target"
    assert progress.is_capture_end("Capture draft cuda graph end. Time elapsed: 12.10 s.")
    assert progress.mem_fraction_value("ServerArgs(tp_size=8, mem_fraction_static=0.88, x=1)") == (
        "0.88"
    )
    assert progress.mem_fraction_value(
        "Current value: self.server_args.mem_fraction_static=0.2"
    ) == ("0.2")
    assert progress.mem_fraction_value("[--mem-fraction-static MEM_FRACTION_STATIC]") is None


def test_progress_steps_as_the_classifier_reads_them() -> None:
    rules = SGLANG_CRASH_RULES
    ready = rules.progress("[x] The server is fired up and ready to roll!")
    assert ready is not None and ready.kind == "ready"
    draft = rules.progress("Capture draft cuda graph begin. This can take up")
    assert draft is not None and (draft.kind, draft.draft) == ("capture_begin", True)
    loading = rules.progress("Load weight begin. avail mem=70.00 GB")
    assert loading is not None and loading.loading and loading.phase == "loading weights"
    assert rules.progress("Load weight end. type=DeepseekV3") is not None
    assert rules.progress("some other line") is None
    assert rules.settings("ServerArgs(mem_fraction_static=0.88)") == {"mem_fraction_static": "0.88"}
    assert rules.settings("no value here") == {}
