"""Reading a vLLM release's flags from its own parser, in the interpreter that runs it."""

from __future__ import annotations

import sys

import pytest

from autotune._errors import EngineError
from autotune.engines import EngineSpec, create_engine
from autotune.engines.vllm import detect_flags, known_flags, known_releases
from autotune.engines.vllm._flags import flags_from_report


def test_an_interpreter_without_vllm_is_named_with_what_to_do() -> None:
    with pytest.raises(EngineError, match="vLLM is not importable") as info:
        detect_flags(sys.executable, env={"PYTHONPATH": ""})
    assert "engine.vllm_version" in (info.value.hint or "")


def test_a_missing_interpreter_is_named() -> None:
    with pytest.raises(EngineError, match="was not found"):
        detect_flags("/no/such/python")


def test_study_start_check_reports_a_missing_vllm() -> None:
    engine = create_engine(EngineSpec(kind="vllm", model_path="/m", python="/no/such/python"))
    with pytest.raises(EngineError, match="cannot read vLLM's flags"):
        engine.check_installed()


def test_a_report_becomes_flags_with_choices() -> None:
    flags = flags_from_report(
        {"version": "0.33.0", "options": {"--port": None, "--block-size": ["8", "16"]}},
        source="test",
    )
    assert flags.accepts("--block-size", "16") and not flags.accepts("--block-size", "12")
    assert flags.has("--port") and flags.release == "vLLM 0.33.0"
    with pytest.raises(EngineError, match="malformed"):
        flags_from_report({"options": {"--port": 3}}, source="test")


def test_the_tables_differ_in_the_graph_size_flag() -> None:
    assert set(known_releases()) == {"0.34.0", "0.33.0", "0.10.2"}
    assert known_flags("0.33.0").has("--max-cudagraph-capture-size")
    assert known_flags("0.10.2").has("--cuda-graph-sizes")
    assert not known_flags("0.10.2").has("--max-cudagraph-capture-size")
