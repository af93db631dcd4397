"""Injected faults: parsing, and each fault against a real server process."""

from __future__ import annotations

import json

import httpx
import pytest

from autotune._errors import ConfigError
from autotune.sim._faults import FaultPlan, parse_fault

from ._procs import READY_LINE, SEED_MODEL, SEED_PROFILE, SimLauncher


def test_parse_and_schedule() -> None:
    plan = FaultPlan.parse(["http_500:3", "garbage:2", "slow_start:2.5", "refuse_connections"])
    assert plan == FaultPlan(http_500=3, garbage=2, slow_start=2.5, refuse_connections=True)
    assert [plan.action_for(i) for i in range(1, 7)] == [
        None, "garbage", "http_500", None, None, "http_500",
    ]  # fmt: skip
    assert not FaultPlan().active and plan.active
    crash = FaultPlan(crash_mid_benchmark=3)
    assert not crash.crashes_after(2) and crash.crashes_after(3)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("explode", "unknown fault"),
        ("hang_startup:1", "takes no argument"),
        ("stall_stream", "needs an argument"),
        ("drop_connection:0", ">= 1"),
        ("slow_start:0", "positive factor"),
        ("slow_start:abc", "positive factor"),
    ],
)
def test_bad_specs_name_the_problem(spec: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_fault(spec)


def gen(c: httpx.Client, stream: bool = False, n: int = 6) -> httpx.Response:
    body = {"text": "fault", "sampling_params": {"max_new_tokens": n}, "stream": stream}
    return c.post("/generate", json=body)


def test_hang_startup_stops_after_weight_loading(sim: SimLauncher) -> None:
    server = sim.spawn("--sim-fault", "hang_startup", time_scale="0")
    assert server.wait_for("Load weight end.")
    # with durations scaled to zero the rest of the start-up would follow at once
    assert not server.wait_for("KV Cache is allocated", timeout=1.0)
    assert server.proc.poll() is None
    assert READY_LINE not in server.log()
    assert server.terminate() == 0


def test_slow_start_multiplies_start_up_durations(sim: SimLauncher) -> None:
    seed = {"profile": SEED_PROFILE, "model": SEED_MODEL, "time_scale": "0.001"}
    # 584 s of weight loading: 0.6 s at this scale, 5.8 s ten times slower
    normal = sim.start("--tp", "8", **seed)
    slow = sim.spawn("--tp", "8", "--sim-fault", "slow_start:10", **seed)
    assert slow.wait_for("Init torch distributed ends.")
    assert not slow.wait_for("Load weight end.", timeout=1.5)
    assert READY_LINE in normal.log()
    assert slow.terminate() == 0


def test_crash_mid_benchmark(sim: SimLauncher) -> None:
    server = sim.start("--sim-fault", "crash_mid_benchmark:2")
    with httpx.Client(base_url=server.url, timeout=10) as c:
        assert c.get("/health_generate").status_code == 200  # not counted
        assert gen(c).status_code == 200
        assert gen(c).status_code == 200
    code = server.wait_exit(20)
    assert code != 0
    log = server.log()
    assert "CUDA error: an illegal memory access was encountered" in log
    assert log.rstrip().endswith("It usually means the child failed.")


def test_stall_stream_keeps_the_connection_silent(sim: SimLauncher) -> None:
    server = sim.start("--sim-fault", "stall_stream:1")
    body = {"text": "s", "sampling_params": {"max_new_tokens": 50}, "stream": True}
    timeout = httpx.Timeout(10, read=1.0)
    with httpx.Client(base_url=server.url, timeout=timeout) as c:
        with c.stream("POST", "/generate", json=body) as response, pytest.raises(httpx.ReadTimeout):
            for _ in response.iter_lines():
                pass
        assert gen(c).status_code == 200  # the next request is served normally
    assert server.terminate() == 0


def test_refuse_connections_after_the_ready_line(sim: SimLauncher) -> None:
    server = sim.start("--sim-fault", "refuse_connections")
    assert "Uvicorn running on" in server.log()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health", timeout=5)
    assert server.terminate() == 0


def test_garbage_bodies(sim: SimLauncher) -> None:
    server = sim.start("--sim-fault", "garbage:1")
    with httpx.Client(base_url=server.url, timeout=10) as c:
        body = {"text": "g", "sampling_params": {"max_new_tokens": 8}, "stream": True}
        with c.stream("POST", "/generate", json=body) as response:
            data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
        assert data[-1] == "[DONE]"
        json.loads(data[0])
        with pytest.raises(ValueError):
            json.loads(data[1])
        assert gen(c).json()["meta_info"]["completion_tokens"] == 6
    again = sim.start("--sim-fault", "garbage:1")
    response = gen(httpx.Client(base_url=again.url, timeout=10))
    assert response.status_code == 200
    with pytest.raises(ValueError):
        json.loads(response.content)


def test_every_nth_request_gets_500(sim: SimLauncher) -> None:
    server = sim.start("--sim-fault", "http_500:2")
    with httpx.Client(base_url=server.url, timeout=10) as c:
        codes = [gen(c).status_code for _ in range(4)]
        chat = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                    "max_tokens": 2})  # fmt: skip
    assert codes == [200, 500, 200, 500]
    assert chat.status_code == 200  # request 5


@pytest.mark.parametrize("stream", [True, False])
def test_drop_connection_mid_response(sim: SimLauncher, stream: bool) -> None:
    server = sim.start("--sim-fault", "drop_connection:1")
    with httpx.Client(base_url=server.url, timeout=10) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            if stream:
                body = {"text": "d", "sampling_params": {"max_new_tokens": 20}, "stream": True}
                with c.stream("POST", "/generate", json=body) as response:
                    for _ in response.iter_lines():
                        pass
            else:
                gen(c, n=20)
        assert gen(c).status_code == 200
