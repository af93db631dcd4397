"""The simulator's ``endless_line`` fault against the real ``autotune bench run``: the request
fails with a message naming the endless line, and the client's memory stays bounded."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil

from autotune.bench._sse import MAX_LINE_CHARS
from autotune.sim._faults import FaultPlan, parse_fault

from ._procs import SimLauncher


def test_endless_line_parses() -> None:
    assert parse_fault("endless_line:2") == ("endless_line", 2)
    plan = FaultPlan.parse(["endless_line:2"])
    assert [plan.action_for(i) for i in (1, 2, 3)] == [None, "endless", None]


def test_bench_run_fails_the_request_with_bounded_memory(sim: SimLauncher) -> None:
    server = sim.start("--sim-fault", "endless_line:1")
    argv = [sys.executable, "-m", "autotune", "bench", "run", "--url", server.url, "--json"]
    argv += ["--num-prompts", "2", "--concurrency", "1", "--warmup", "0", "--requests"]
    argv += ["--input-len", "16", "--output-len", "8", "--timeout", "120"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watched = psutil.Process(proc.pid)
    peak = 0
    deadline = time.monotonic() + 150
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err
    result = json.loads(out)
    runs = result.get("results") or [result]
    requests = [r for run in runs for r in run.get("requests", [])]
    failed = [r for r in requests if r.get("error")]
    assert [r["error"] for r in failed] == ["line_too_long"], requests
    assert "without ending it" in failed[0]["error_detail"]
    # the interpreter and its imports take some 100 MB; the line is cut at 8 Mi characters
    assert peak < 400 * 1024 * 1024, peak
    assert MAX_LINE_CHARS <= 8 * 1024 * 1024
    assert server.terminate() == 0
