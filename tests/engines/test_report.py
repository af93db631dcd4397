"""Reading an engine parser's report: a real interpreter runs the script in a subprocess."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from autotune._errors import EngineError
from autotune.engines._report import ParserReport, ReportProbe

MARKER = "TEST-REPORT "
ADVICE = dict(
    missing="advice: missing",
    slow="advice: slow",
    unrunnable="advice: unrunnable",
    failed="advice: failed",
    not_importable="advice: not importable",
)


def _read(
    script: str,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
) -> ParserReport:
    probe = ReportProbe(engine="Engine", script=script, marker=MARKER, **ADVICE)
    return probe.read(python, env=env, timeout_s=timeout_s)


def test_the_last_marked_line_is_the_report_whatever_else_is_printed() -> None:
    script = (
        "import json, os\n"
        "print('importing...')\n"
        f"print({MARKER!r} + json.dumps({{'n': 1}}))\n"
        f"print({MARKER!r} + json.dumps({{'n': 2, 'v': os.environ['X_REPORT']}}))\n"
    )
    found = _read(script, env={"X_REPORT": "seen"})
    assert found.report == {"n": 2, "v": "seen"}
    assert found.where == sys.executable


def test_no_report_names_the_exit_code_and_the_last_lines() -> None:
    script = "import sys\nfor i in range(5): print('line', i, file=sys.stderr)\nsys.exit(3)"
    with pytest.raises(EngineError, match=r"exit code 3: line 2 \| line 3 \| line 4") as info:
        _read(script)
    assert "advice: failed" in str(info.value.hint)


def test_an_error_in_the_report_says_the_engine_is_not_importable() -> None:
    script = f"import json\nprint({MARKER!r} + json.dumps({{'error': 'ImportError: no'}}))"
    with pytest.raises(EngineError, match=r"Engine is not importable by .*ImportError: no"):
        _read(script)


def test_an_interpreter_that_cannot_run_is_named(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="was not found") as info:
        _read("pass", python=str(tmp_path / "missing"))
    assert info.value.hint == "advice: missing"
    with pytest.raises(EngineError, match=r"cannot run .* to read Engine's flags") as info:
        _read("pass", python=str(tmp_path))  # a folder: not executable
    assert info.value.hint == "advice: unrunnable"


def test_a_run_past_its_time_is_stopped() -> None:
    with pytest.raises(EngineError, match="took longer than 1 s") as info:
        _read("import time\ntime.sleep(30)", timeout_s=1.0)
    assert info.value.hint == "advice: slow"
