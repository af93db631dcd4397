"""Release detection through real interpreters and prefixes, where SGLang is absent or broken.

Detection against the real SGLang parsers is in test_contract_sglang.py.
"""

from __future__ import annotations

import sys

import pytest

from autotune._errors import EngineError
from autotune._knobs import ServerConfig
from autotune.engines import EngineSpec, SGLangEngine, detect_flagset
from autotune.engines.sglang._detect import MARKER, flagset_from_report


def test_sglang_missing_from_the_interpreter_is_a_clear_error() -> None:
    # The project's own interpreter has no SGLang.
    with pytest.raises(EngineError) as info:
        detect_flagset(sys.executable)
    message = str(info.value)
    assert f"SGLang is not importable by {sys.executable}" in message
    assert "ModuleNotFoundError" in message
    assert info.value.hint is not None and "engine.sglang_version" in info.value.hint


def test_a_missing_interpreter_is_a_clear_error() -> None:
    with pytest.raises(EngineError, match="'/nonexistent/bin/python' was not found") as info:
        detect_flagset("/nonexistent/bin/python")
    assert info.value.hint is not None and "engine.python" in info.value.hint


def test_a_failing_prefix_reports_its_exit_code_and_output() -> None:
    prefix = ("sh", "-c", "echo 'container sgl is not running' >&2; exit 7", "sh")
    with pytest.raises(EngineError, match="exit code 7: container sgl is not running"):
        detect_flagset("python3", prefix)


def test_a_hung_interpreter_times_out() -> None:
    with pytest.raises(EngineError, match="took longer than 1 s"):
        detect_flagset("python3", ("sh", "-c", "exec sleep 30", "sh"), timeout_s=1.0)


def test_the_report_is_found_among_what_sglang_prints_while_importing() -> None:
    script = (
        "import json; print('INFO: loading plugins'); "
        f"print({MARKER!r} + json.dumps({{'version': '9.9.9', 'options': "
        "{'--tp-size': {'dest': 'tp_size', 'nargs': None, 'choices': None, 'type': 'int', "
        "'flag': False, 'deprecated': False}, '--old': {'dest': 'old', 'nargs': 0, "
        "'choices': None, 'type': None, 'flag': True, 'deprecated': True}}}));"
        "print('bye')"
    )
    # The prefix runs a stand-in interpreter that prints a report the way the real script does.
    flags = detect_flagset("ignored", (sys.executable, "-c", script))
    assert flags.version == "9.9.9"
    assert flags.dest("--tp-size") == "tp_size"
    assert flags.option("--old") is not None and flags.option("--old").deprecated  # type: ignore[union-attr]
    assert not flags.has("--cuda-graph-max-bs")


def test_a_malformed_report_is_an_engine_error() -> None:
    with pytest.raises(EngineError, match="malformed entry '--x'"):
        flagset_from_report({"version": "1", "options": {"--x": {"nargs": 0}}}, source="test")
    with pytest.raises(EngineError, match="has no options"):
        flagset_from_report({"version": "1"}, source="test")


def test_the_engine_uses_the_version_table_without_running_anything() -> None:
    spec = EngineSpec(kind="sglang", python="/nonexistent/bin/python", sglang_version="0.5.23")
    engine = SGLangEngine(spec)
    engine.check_installed()  # nothing to run: the table is used
    assert engine.flagset().has("--cuda-graph-max-bs-decode")


def test_the_engine_reports_a_missing_sglang_at_check_installed() -> None:
    engine = SGLangEngine(EngineSpec(kind="sglang", python=sys.executable))
    with pytest.raises(EngineError, match="not importable"):
        engine.check_installed()


def test_the_report_names_the_console_script_and_the_declared_switches() -> None:
    option = {"dest": "tp_size", "nargs": None, "choices": None, "type": "int", "flag": False}
    report = {
        "version": "0.5.11",
        "options": {"--tp-size": option},
        "serve_script": "/opt/venv/bin/sglang",
        "env": ["SGLANG_ENABLE_SPEC_V2"],
    }
    flags = flagset_from_report(report, source="test")
    assert flags.serve_script == "/opt/venv/bin/sglang"
    assert flags.env_vars == frozenset({"SGLANG_ENABLE_SPEC_V2"})
    bare = flagset_from_report({"version": "0.5.3", "options": {"--tp-size": option}}, source="t")
    assert bare.serve_script is None and bare.env_vars == frozenset()
    # a detected release launches what it names, through the interpreter that was detected
    engine = SGLangEngine(EngineSpec(kind="sglang", python="/opt/venv/bin/python"), flags=flags)
    argv = engine.build_launch(ServerConfig(), port=1).argv
    assert argv[:3] == ("/opt/venv/bin/python", "/opt/venv/bin/sglang", "serve")
