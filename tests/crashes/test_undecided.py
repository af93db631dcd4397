"""'Still starting' only where something says a server is starting: the process runs, or the log
ends in a known start-up step; text with neither, no crash sign and no exit status is undecided."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import crashes
from autotune.cli import main
from autotune.engines import EngineSpec, create_engine

pytestmark = pytest.mark.timeout(60)

RULES = {kind: create_engine(EngineSpec(kind=kind)).crash_rules() for kind in ("sglang", "vllm")}
#: Text that shows no start-up step, no error and no crash sign.
PLAIN = "Hello from some program\nwriting a report to /tmp/out.txt\nall done\n"
#: A log that ends in a known start-up step of each engine (the weights being loaded).
LOADING = {
    "sglang": "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=70.00 GB\n",
    "vllm": "INFO 01-01 10:00:00 [gpu_model_runner.py:1] Starting to load model /m...\n",
}
#: The first line each engine writes at every launch (no word of a crash in it).
FIRST_LINE = {
    "sglang": "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='/m', tp_size=1)\n",
    "vllm": "INFO 01-01 10:00:00 [api_server.py:1] vLLM API server version 0.11.0\n",
}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_text_with_no_start_up_step_and_no_crash_is_undecided(engine: str) -> None:
    verdict = crashes.classify_text(PLAIN, RULES[engine])
    assert verdict.category == crashes.UNDECIDED
    assert not verdict.is_crash
    assert verdict.moves == ()  # no knob is implicated
    assert verdict.evidence is None


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_same_text_is_starting_while_its_process_runs(engine: str) -> None:
    assert crashes.classify_text(PLAIN, RULES[engine], alive=True).category == "starting"
    live = crashes.LiveClassifier(RULES[engine])
    for line in PLAIN.splitlines():
        assert live.feed(line) is None
    assert live.state == "starting"  # the live start-up watch: the process is alive


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_same_text_of_a_process_that_exited_is_an_unknown_crash(engine: str) -> None:
    verdict = crashes.classify_text(PLAIN, RULES[engine], exit_code=1)
    assert (verdict.category, verdict.exit_code, verdict.moves) == (crashes.UNKNOWN_CRASH, 1, ())


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("log", [LOADING, FIRST_LINE], ids=["loading", "first_line"])
def test_a_log_that_ends_in_a_known_start_up_step_is_starting(
    engine: str, log: dict[str, str]
) -> None:
    verdict = crashes.classify_text(PLAIN + log[engine], RULES[engine])
    assert verdict.category == "starting"
    assert crashes.classify_text(log[engine], RULES[engine], exit_code=-9).category == (
        crashes.UNKNOWN_CRASH
    )


def test_logs_classify_reports_undecided_text_as_no_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "notes.txt"
    log.write_text(PLAIN, encoding="utf-8")
    assert main(["logs", "classify", str(log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["category"], data["is_crash"], data["moves"]) == (crashes.UNDECIDED, False, [])
    assert main(["logs", "classify", str(log), "--json", "--exit-code", "137"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert (data["category"], data["exit_code"]) == (crashes.UNKNOWN_CRASH, 137)
