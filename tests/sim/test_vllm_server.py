"""The simulated vLLM server as a process, launched exactly as a study launches it: vLLM's
start-up log, readiness, routes, ``/metrics`` and its crashes as vLLM's crash rules read them."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotune._knobs import ServerConfig
from autotune.crashes import classify_text
from autotune.engines import EngineSpec, SimOptions, create_engine
from autotune.engines.vllm import READY_LINE, VLLM_CRASH_RULES, acceptance_from_metrics

from ._procs import SimLauncher, SimServer, free_port

SPEC = EngineSpec(
    kind="sim-vllm",
    model_path="meta-llama/Llama-3.1-8B-Instruct",
    draft_model_path="/models/eagle3",
    sim=SimOptions(profile="h100-llama-3.1-8b", time_scale=0.0005, noise=0.0, seed=1),
)
EAGLE = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=3,
    gpu_memory_utilization=0.9,
    max_running_requests=8,
    cuda_graph_max_bs=16,
)


def launch(
    sim: SimLauncher, config: ServerConfig, *, spec: EngineSpec = SPEC, wait: bool = True
) -> SimServer:
    port = free_port()
    argv = create_engine(spec).build_launch(config, port=port).argv
    log_path = sim.directory / f"vllm-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = SimServer(proc, port, log_path)
    sim.servers.append(server)
    if wait and not server.wait_for(READY_LINE, 60):
        server.kill()
        pytest.fail(f"the simulated vLLM server did not become ready:\n{server.log()}")
    return server


@pytest.fixture(scope="module")
def eagle(module_sim: SimLauncher) -> Iterator[SimServer]:
    yield launch(module_sim, EAGLE)


def test_start_up_log_is_vllms_in_its_order(eagle: SimServer) -> None:
    log = eagle.log()
    order = [
        "[api_server.py:1896] vLLM API server version 0.33.0",
        "Starting to load model meta-llama/Llama-3.1-8B-Instruct",
        "Model loading took ",
        "Available KV cache memory: ",
        "GPU KV cache size: ",
        "Maximum concurrency for 131,072 tokens per request: ",
        "Capturing CUDA graphs",
        "Graph capturing finished in ",
        "init engine (profile, create kv cache, warmup model) took ",
        "Route: /v1/completions, Methods: POST",
        "INFO:     Application startup complete.",
    ]
    places = [log.find(text) for text in order]
    assert all(p >= 0 for p in places) and places == sorted(places), log
    assert "(EngineCore_DP0 pid=" in log and "(APIServer pid=" in log
    verdict = classify_text(log, VLLM_CRASH_RULES)
    assert verdict.category == "ready" and not verdict.is_crash


def test_routes_are_vllms(eagle: SimServer) -> None:
    with httpx.Client(base_url=eagle.url, timeout=30) as c:
        assert c.get("/health").status_code == 200
        card = c.get("/v1/models").json()["data"][0]
        assert card["id"] == SPEC.model_path and card["owned_by"] == "vllm"
        assert card["max_model_len"] == 131072
        assert c.get("/version").json() == {"version": "0.33.0"}
        assert c.post("/generate", json={"text": "x"}).status_code == 404  # SGLang's, not vLLM's
        assert c.get("/get_server_info").status_code == 404
        body = c.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 6}).json()
        assert body["usage"]["completion_tokens"] == 6
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}
        with c.stream("POST", "/v1/chat/completions", json=chat) as r:
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        assert json.loads(events[1][6:])["object"] == "chat.completion.chunk"


def test_metrics_count_this_runs_drafts(eagle: SimServer) -> None:
    with httpx.Client(base_url=eagle.url, timeout=30) as c:
        before = c.get("/metrics").text
        for _ in range(3):
            c.post("/v1/completions", json={"prompt": "tell me", "max_tokens": 40})
        after = c.get("/metrics").text
    samples = {s.name: s.value for f in text_string_to_metric_families(after) for s in f.samples}
    drafts = samples["vllm:spec_decode_num_drafts_total"]
    assert drafts > 0
    assert samples["vllm:spec_decode_num_draft_tokens_total"] == 3 * drafts  # chains of 3
    assert 0 < samples["vllm:spec_decode_num_accepted_tokens_total"] <= 3 * drafts
    assert samples["vllm:generation_tokens_total"] >= 120
    acceptance = acceptance_from_metrics(before, after)
    assert acceptance is not None and acceptance.source == "metrics_diff"
    assert 1.0 < acceptance.accept_length <= 4.0
    assert acceptance.accept_rate is not None and 0 < acceptance.accept_rate <= 1


def test_the_api_key_guards_the_v1_routes_only(sim: SimLauncher) -> None:
    spec = dataclasses.replace(SPEC, extra_args=("--api-key", "sk-vsim-1"))
    server = launch(sim, EAGLE.replace(speculative_algorithm="none", speculative_num_steps=None),
                    spec=spec)  # fmt: skip
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200
        assert c.get("/v1/models").status_code == 401
        ok = c.get("/v1/models", headers={"Authorization": "Bearer sk-vsim-1"})
        assert ok.status_code == 200
    assert server.terminate() == 0


@pytest.mark.parametrize(
    ("config", "category"),
    [
        (EAGLE.replace(gpu_memory_utilization=0.2), "oom_kv_pool"),
        (EAGLE.replace(gpu_memory_utilization=0.4), "oom_kv_pool"),
        (EAGLE.replace(gpu_memory_utilization=0.99, cuda_graph_max_bs=512), "oom_cuda_graph"),
    ],
)
def test_a_start_that_crashes_exits_with_a_log_vllms_rules_classify(
    sim: SimLauncher, config: ServerConfig, category: str, tmp_path: Path
) -> None:
    server = launch(sim, config, wait=False)
    assert server.wait_exit(60) == 1
    log = server.log()
    assert "Engine core initialization failed" in log and READY_LINE not in log
    verdict = classify_text(log, VLLM_CRASH_RULES)
    assert (verdict.category, verdict.is_crash) == (category, True), log[-2000:]
    assert "gpu_memory_utilization" in verdict.advice


def test_a_crash_while_serving_is_vllms_engine_core_dying(sim: SimLauncher) -> None:
    """A CUDA error in the forward while serving: vLLM's engine-core traceback and dead-engine
    records (never SGLang's scheduler frames), read by vLLM's rules as a crash of that line."""
    faults = dataclasses.replace(SPEC.sim, faults=("crash_mid_benchmark:2",))
    server = launch(sim, EAGLE, spec=dataclasses.replace(SPEC, sim=faults))
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for _ in range(2):
            c.post("/v1/completions", json={"prompt": "tell me", "max_tokens": 8})
    assert server.wait_exit(30) == 1
    log = server.log()
    assert "EngineCore encountered a fatal error." in log and "EngineDeadError" in log
    assert "vllm/v1/engine/core.py" in log and "/sglang/" not in log
    verdict = classify_text(log, VLLM_CRASH_RULES)
    assert verdict.is_crash, log[-2000:]
    assert verdict.evidence is not None and "illegal memory access" in verdict.evidence
