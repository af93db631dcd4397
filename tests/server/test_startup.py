"""wait_for_startup against real child servers that crash, hang, or come up over real HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune._errors import ConfigError
from autotune.server import (
    Probe,
    Readiness,
    ServerProcess,
    StartupResult,
    find_free_port,
    wait_for_startup,
)

from ._support import SubstringClassifier, running, script

HOST = "127.0.0.1"


#: The ready line the fake server prints (SGLang's), and SGLang's probes.
READY_LINE = "The server is fired up and ready to roll!"
READINESS = Readiness(
    ready_lines=(READY_LINE,),
    probes=(
        Probe("/health_generate"),
        Probe("/get_model_info", json_object=True, needs_key=True),
    ),
)


@pytest.fixture
def port() -> int:
    return find_free_port(HOST)


def start(tmp_path: Path, port: int, mode: str, *extra: object) -> ServerProcess:
    argv = script("fake_server.py", "--port", port, "--mode", mode, *extra)
    return ServerProcess.start(
        argv, log_path=tmp_path / "server.log", port=port, term_timeout_s=5, kill_timeout_s=5
    )


def watch(
    proc: ServerProcess,
    port: int,
    timeout_s: float,
    classifier: SubstringClassifier | None = None,
    **options: Any,
) -> StartupResult:
    return wait_for_startup(
        proc,
        classifier=classifier or SubstringClassifier(),
        readiness=READINESS,
        url=f"http://{HOST}:{port}",
        timeout_s=timeout_s,
        probe_interval_s=0.05,
        **options,
    )


def test_ready_after_ready_line_and_http_checks(tmp_path: Path, port: int) -> None:
    seen: list[str] = []
    classifier = SubstringClassifier()
    with start(tmp_path, port, "ready") as proc:
        result = watch(proc, port, 60, classifier, on_line=seen.append)
        assert proc.poll() is None  # ready means running
    assert result.status == "ready" and result.ready
    assert result.category is None and result.failure_line is None
    assert result.exit_code is None
    assert any(READY_LINE in line for line in seen)
    assert seen == classifier.fed  # every line went to both
    assert result.lines_seen == len(seen)
    assert 0 < result.startup_s < 60


def test_health_generate_is_asked_again_until_it_answers(tmp_path: Path, port: int) -> None:
    with start(tmp_path, port, "flaky", "--fail-first", 3) as proc:
        result = watch(proc, port, 60)
    assert result.status == "ready"
    log = (tmp_path / "server.log").read_text()
    assert log.count('"GET /health_generate HTTP/1.1" 503') == 3
    assert log.count('"GET /health_generate HTTP/1.1" 200') == 1


def test_ready_line_without_health_keeps_waiting_then_times_out(tmp_path: Path, port: int) -> None:
    with start(tmp_path, port, "no-health") as proc:
        result = watch(proc, port, 3)
        assert proc.poll() is None
    assert result.status == "timeout" and result.category == "timeout"
    assert result.startup_s >= 3
    assert "/health_generate answered 503" in result.detail
    assert '"GET /health_generate HTTP/1.1" 503' in (tmp_path / "server.log").read_text()


def test_model_info_must_be_json(tmp_path: Path, port: int) -> None:
    with start(tmp_path, port, "bad-info") as proc:
        result = watch(proc, port, 1.5)
    assert result.status == "timeout"
    assert "get_model_info" in result.detail


def test_health_alone_suffices_without_the_ready_line_requirement(
    tmp_path: Path, port: int
) -> None:
    with start(tmp_path, port, "silent") as proc:
        result = watch(proc, port, 60, require_ready_line=False)
    assert result.status == "ready"


def test_without_the_ready_line_a_healthy_server_is_not_ready(tmp_path: Path, port: int) -> None:
    with start(tmp_path, port, "silent") as proc:
        result = watch(proc, port, 1)
    assert result.status == "timeout"
    assert "no ready line" in result.detail


def test_hanging_startup_times_out(tmp_path: Path, port: int) -> None:
    with start(tmp_path, port, "hang") as proc:
        result = watch(proc, port, 1)
        assert proc.poll() is None
    assert result.status == "timeout" and result.category == "timeout"
    assert result.failure_line is not None and "Load weight begin" in result.failure_line
    assert result.startup_s >= 1
    assert proc.outcome is not None and not running(proc.pid)


def test_crash_line_decides_without_waiting_for_exit(tmp_path: Path, port: int) -> None:
    timeout = 120.0
    with start(tmp_path, port, "oom-line") as proc:
        result = watch(proc, port, timeout)
        assert proc.poll() is None  # still running: the line alone decided
    assert result.status == "crashed"
    assert result.category == "oom_kv_pool"
    assert result.failure_line is not None and "Not enough memory" in result.failure_line
    assert result.exit_code is None
    assert result.startup_s < timeout / 4


def test_crash_after_carriage_return_progress_bars(tmp_path: Path, port: int) -> None:
    seen: list[str] = []
    with start(tmp_path, port, "progress") as proc:
        result = watch(proc, port, 120, on_line=seen.append)
    assert result.category == "oom_kv_pool"
    assert "Loading safetensors: 50%" in seen


def test_fast_crash_with_traceback(tmp_path: Path, port: int) -> None:
    timeout = 120.0
    with start(tmp_path, port, "traceback") as proc:
        result = watch(proc, port, timeout)
    assert result.status == "crashed"
    assert result.category == "other_crash"
    assert result.failure_line == "ValueError: the checkpoint has an unknown layout"
    assert result.exit_code == 1
    assert result.startup_s < timeout / 4


def test_exit_without_evidence(tmp_path: Path, port: int) -> None:
    with start(tmp_path, port, "exit0") as proc:
        result = watch(proc, port, 120)
    assert result.status == "exited"
    assert result.category == "unknown_crash"
    assert result.exit_code == 0
    assert result.failure_line == "nothing to do"  # the last line of the log
    assert "exited with code 0" in result.detail


def test_a_url_without_scheme_is_a_config_error(tmp_path: Path, port: int) -> None:
    with start(tmp_path, port, "hang") as proc, pytest.raises(ConfigError, match="URL"):
        wait_for_startup(
            proc,
            classifier=SubstringClassifier(),
            readiness=READINESS,
            url=f"{HOST}:{port}",
            timeout_s=5,
        )


def test_an_unexplained_exit_is_the_crash_readers_unknown_crash() -> None:
    from autotune.crashes import UNKNOWN_CRASH
    from autotune.server import UNEXPLAINED_EXIT

    assert UNEXPLAINED_EXIT == UNKNOWN_CRASH
