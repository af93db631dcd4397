"""The simulated server as a process: start-up log, crashes, argument errors, shutdown."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import httpx
import pytest

from ._procs import READY_LINE, SEED_MODEL, SEED_PROFILE, SimLauncher

PREFIX = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} TP0\] "
MAIN_PREFIX = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] "


def seed(sim: SimLauncher, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    return sim.run("--tp", "8", *args, profile=SEED_PROFILE, model=SEED_MODEL, env=env)


def index_of(log: str, pattern: str) -> int:
    match = re.search(pattern, log, re.M)
    assert match, f"{pattern!r} not in log:\n{log}"
    return match.start()


def test_start_up_log_follows_sglang_order(sim: SimLauncher) -> None:
    server = sim.start()
    log = server.log()
    order = [
        PREFIX + "Load weight begin. avail mem=",
        PREFIX + "Load weight end. ",
        PREFIX + "KV Cache is allocated. #tokens: ",
        PREFIX + "Memory pool end. ",
        PREFIX + "Capture cuda graph begin. ",
        PREFIX + r"Capture cuda graph bs \[",
        PREFIX + "Capture cuda graph end. ",
        PREFIX + "max_total_num_tokens=",
        MAIN_PREFIX
        + r"INFO:     Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)",
        MAIN_PREFIX + re.escape(READY_LINE),
    ]
    positions = [index_of(log, p) for p in order]
    assert positions == sorted(positions)


def test_health_until_ready_and_sigterm_during_start_up(sim: SimLauncher) -> None:
    seed_kw = {"profile": SEED_PROFILE, "model": SEED_MODEL}
    # weight loading takes 5.8 s at this scale: no HTTP server yet, and SIGTERM ends it
    loading = sim.spawn("--tp", "8", time_scale="0.01", **seed_kw)
    assert loading.wait_for("Init torch distributed ends.")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{loading.url}/health", timeout=2)
    assert loading.terminate() == 0
    # the seed profile's warm-up generation takes about half a second of real time
    warming = sim.spawn("--tp", "8", **seed_kw)
    assert warming.wait_for("Uvicorn running on")
    with httpx.Client(base_url=warming.url, timeout=10) as c:
        assert c.get("/health").status_code == 503
        assert c.get("/health_generate").status_code == 503
        assert warming.wait_for(READY_LINE)
        assert c.get("/health").status_code == 200
    assert warming.terminate() == 0


def test_sigterm_during_a_stream_exits_0(sim: SimLauncher) -> None:
    server = sim.start()
    body = {"text": "x", "sampling_params": {"max_new_tokens": 5000}, "stream": True}
    with (
        httpx.Client(base_url=server.url, timeout=20) as c,
        c.stream("POST", "/generate", json=body) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()  # kept: dropping it closes the connection
        next(lines)
        assert server.terminate() == 0


def test_kv_pool_crash_prints_the_plan_lines_and_exits_non_zero(sim: SimLauncher) -> None:
    code, log = seed(sim, "--mem-fraction-static", "0.5")
    assert code != 0
    assert re.search(PREFIX + r"Scheduler hit an exception: Traceback", log)
    assert (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.5" in log
    )
    assert "Received sigquit from a child process" in log
    assert "KV Cache is allocated" not in log and READY_LINE not in log


def test_graph_capture_crash_on_the_seed_hardware(sim: SimLauncher) -> None:
    code, log = seed(sim, "--enable-flashinfer-allreduce-fusion")
    assert code != 0
    assert "Capture cuda graph begin." in log
    assert "Capture cuda graph failed: No supported CUDA architectures" in log


def test_fewer_visible_gpus_than_tensor_parallel_ranks(sim: SimLauncher) -> None:
    code, log = seed(sim, env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert code != 0
    assert "CUDA error: invalid device ordinal" in log
    assert "Load weight begin" not in log


def test_argument_rule_traceback_and_exit_code(sim: SimLauncher) -> None:
    code, log = sim.run("--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "4")
    assert code == 1
    assert log.splitlines()[0] == "Traceback (most recent call last):"
    assert log.splitlines()[-1] == "AssertionError"


def test_speculative_warnings_are_logged_and_the_rewrite_is_served(sim: SimLauncher) -> None:
    server = sim.start(
        "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "7",
    )  # fmt: skip
    log = server.log()
    assert re.search(MAIN_PREFIX + "Max running requests is reset to 48 for speculative", log)
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in log
    assert log.count("Max running requests is reset to 48") == 1
    info = httpx.get(f"{server.url}/get_server_info", timeout=10).json()
    assert info["speculative_num_draft_tokens"] == 3
    assert info["max_running_requests"] == 48


@pytest.mark.parametrize("entry", ["module", "cli"])
def test_argparse_errors_exit_2_without_traceback(entry: str) -> None:
    prefix = [sys.executable, "-m", "autotune.sim"]
    if entry == "cli":
        prefix = [sys.executable, "-m", "autotune", "sim", "serve"]
    done = subprocess.run(
        [*prefix, "--model-path", "m", "--cuda-graph-max-bs", "64"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage: ")
    assert "ambiguous option: --cuda-graph-max-bs could match" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("profile", ["no-such-profile", "{path}"])
def test_bad_profile_is_one_clear_message(sim: SimLauncher, profile: str) -> None:
    bad = sim.directory / "typo.yaml"
    bad.write_text("name: typo\nhardwar: {}\n", encoding="utf-8")
    name = profile.format(path=bad)
    code, log = sim.run(profile=name)
    assert code == 2
    assert "Traceback" not in log
    (line,) = log.strip().splitlines()
    assert line.startswith("autotune.sim: error: ")
    assert ("no-such-profile" if "{" not in profile else "typo.yaml") in line


def test_decode_lines_every_interval_in_the_old_dialect(sim: SimLauncher) -> None:
    server = sim.start(
        "--sim-dialect", "0.5.3", "--decode-log-interval", "5", "--cuda-graph-max-bs", "64"
    )  # fmt: skip
    out = httpx.post(f"{server.url}/generate", json={"text": "go", "sampling_params": {
        "max_new_tokens": 31}}, timeout=20)  # fmt: skip
    assert out.status_code == 200
    # the warm-up decodes 7 tokens, this request 30, one per step: lines at steps 5, ..., 35
    lines = [line for line in server.log().splitlines() if "Decode batch." in line]
    assert len(lines) == 7
    assert re.match(PREFIX + r"Decode batch\. #running-req: 1, #token: \d+, token usage: "
                    r"\d\.\d\d, cuda graph: True, gen throughput \(token/s\): \d+\.\d\d, "
                    r"#queue-req: 0, $", lines[-1])  # fmt: skip


def test_sigint_also_stops_cleanly(sim: SimLauncher) -> None:
    server = sim.start()
    server.proc.send_signal(signal.SIGINT)
    assert server.wait_exit(10) == 0


def test_autotune_sim_serve_starts_the_same_server(sim: SimLauncher) -> None:
    server = sim.start("--served-model-name", "via-cli", "--disable-cuda-graph", entry="cli")
    models = httpx.get(f"{server.url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["via-cli"]
    log = server.log()
    assert log.startswith(
        "'--disable-cuda-graph' is deprecated and will be removed in a future release."
    )
    assert "Capture cuda graph" not in log
    assert server.terminate() == 0


def test_a_port_in_use_fails_like_uvicorn(sim: SimLauncher) -> None:
    first = sim.start()
    code, log = sim.run(port=first.port)
    assert code == 1
    assert "error while attempting to bind on address" in log
    assert READY_LINE not in log


def test_each_start_draws_its_own_seed_unless_one_is_given(sim: SimLauncher) -> None:
    # SGLang draws --random-seed when none is given, so two starts of one configuration serve
    # with noise of their own (repeated starts on a real box differ); a given seed holds
    seeds = []
    for args in ((), (), ("--random-seed", "7"), ("--sim-seed", "5")):
        server = sim.start("--sim-noise", "0.02", *args)
        info = httpx.get(f"{server.url}/get_server_info", timeout=10).json()
        seeds.append(info["random_seed"])
        assert server.terminate() == 0
    assert all(isinstance(s, int) for s in seeds), seeds
    assert seeds[0] != seeds[1], seeds
    assert seeds[2:] == [7, 5], seeds
