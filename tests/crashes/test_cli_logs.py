"""`autotune logs classify` through the real entry point and as a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import main

from ._data import REAL, UNSEEN

pytestmark = pytest.mark.timeout(60)


def test_prints_category_evidence_and_advice(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["logs", "classify", str(REAL / "05_oom_kv_pool.log")])
    assert code == 1  # a crash: scripts can branch on the status
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "category: oom_kv_pool (crash)"
    assert out[1].startswith("evidence: line 14: RuntimeError: Not enough memory.")
    assert out[2].startswith("advice:   raise --mem-fraction-static")


def test_healthy_log_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "classify", str(UNSEEN / "u16_loading_only.log")]) == 0
    out = capsys.readouterr().out
    assert "category: starting (no crash)" in out
    assert "evidence: none" in out


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "classify", str(REAL / "09_ready.log"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {
        "category": "ready",
        "evidence": "The server is fired up and ready to roll!",
        "line_number": 11,
        "advice": data["advice"],
        "moves": [],
        "is_crash": False,
        "exit_code": None,
    }
    assert data["advice"]


def test_the_engine_kind_picks_the_rules(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(REAL / "05_oom_kv_pool.log")
    assert main(["logs", "classify", log]) == 1
    default = capsys.readouterr().out
    assert main(["logs", "classify", log, "--engine", "sglang"]) == 1
    assert capsys.readouterr().out == default  # SGLang's rules are the default
    assert main(["logs", "classify", log, "--engine", "sim"]) == 1  # the simulator logs alike
    assert capsys.readouterr().out == default
    assert main(["logs", "classify", log, "--engine", "no-such-engine"]) == 2
    assert "unknown engine kind 'no-such-engine'" in capsys.readouterr().err


def test_missing_file_is_a_message_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "server.log"
    assert main(["logs", "classify", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{missing}: log file not found" in captured.err
    assert "Traceback" not in captured.err


def test_as_a_process(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "autotune", "logs", "classify"]
    log = UNSEEN / "u03_eagle_draft_graph_oom.log"
    done = subprocess.run([*cmd, str(log), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr  # a crash
    data = json.loads(done.stdout)
    assert (data["category"], data["line_number"], data["is_crash"]) == ("oom_cuda_graph", 25, True)
    missing = tmp_path / "gone.log"
    done = subprocess.run(
        [*cmd, str(missing), "--json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "log file not found" in done.stderr and str(missing) in done.stderr
    assert "Traceback" not in done.stderr


def test_exit_status_tells_a_crash_from_no_crash(capsys: pytest.CaptureFixture[str]) -> None:
    """1 on a crashed log (plain and --json), 0 on a healthy one; the --help says so."""
    crashed = str(REAL / "05_oom_kv_pool.log")
    assert main(["logs", "classify", crashed]) == 1
    assert main(["logs", "classify", crashed, "--json"]) == 1
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["is_crash"] is True
    assert main(["logs", "classify", str(REAL / "09_ready.log")]) == 0
    assert main(["logs", "classify", str(REAL / "09_ready.log"), "--json"]) == 0
    capsys.readouterr()
    assert main(["logs", "classify", "--help"]) == 0
    helptext = " ".join(capsys.readouterr().out.split())
    assert "0 when the log shows no crash, 1 when it shows one" in helptext


def test_the_exit_code_is_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text("Load weight begin. avail mem=78.50 GB\n", encoding="utf-8")
    assert main(["logs", "classify", str(log)]) == 0  # no exit known: the server may be loading
    assert "category: starting" in capsys.readouterr().out
    assert main(["logs", "classify", str(log), "--exit-code", "-9", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert (data["category"], data["exit_code"], data["moves"]) == ("unknown_crash", -9, [])
    assert main(["logs", "classify", str(log), "--exit-code", "1"]) == 1
    out = capsys.readouterr().out
    assert "category: unknown_crash (crash)" in out and "exited with code 1" in out


@pytest.mark.parametrize("bad", ["abc", "1.5", "256", "-65", ""])
def test_a_bad_exit_code_is_refused_clearly(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "classify", str(REAL / "09_ready.log"), "--exit-code", bad]) == 2
    err = capsys.readouterr().err
    assert "--exit-code" in err and "Traceback" not in err
