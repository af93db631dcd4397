"""The simulated vLLM server's process: vLLM's start-up, readiness, serving log and shutdown.

:class:`VLLMProcess` is :class:`~autotune.sim.__main__.SimProcess` with vLLM's command line
(:mod:`autotune.sim._vllm_args`), its memory rule and start-up log
(:mod:`autotune.sim._vllm_startup`), its HTTP surface (``/health``, ``/version``,
``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``, ``/metrics`` with the ``vllm:``
names) and its readiness: no warm-up request; the API server lists its routes and uvicorn prints
``Application startup complete.`` once it serves.

:class:`VLLMRuntime` logs as vLLM's engine does while serving: every
:data:`STATS_INTERVAL_S` seconds of serving, the ``Engine 000: Avg prompt throughput: ...`` line
and, with speculation, the ``SpecDecoding metrics: ...`` line of the same interval.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.sim._args import LaunchArgs
from autotune.sim._engine import ServingEngine
from autotune.sim._exposition import ServerMetrics, VLLMMetrics
from autotune.sim._logging import SGLangLog, uvicorn_log_config, uvicorn_started_lines
from autotune.sim._model import SimModel
from autotune.sim._process import SimProcess
from autotune.sim._profile import load_profile
from autotune.sim._responses import ServerInfo
from autotune.sim._runtime import ServingRuntime
from autotune.sim._server import SimServer
from autotune.sim._types import StepResult
from autotune.sim._vllm_args import resolve_vllm_launch
from autotune.sim._vllm_log import api, engine
from autotune.sim._vllm_startup import PACKAGE, VERSION

#: Seconds between two statistics lines of the serving engine (vLLM's default interval).
STATS_INTERVAL_S = 10.0
_ROUTES = ("/health", "/version", "/v1/models", "/v1/completions", "/v1/chat/completions",
           "/metrics")  # fmt: skip


class VLLMRuntime(ServingRuntime):
    """The serving loop with vLLM's ``vllm:`` metrics and its periodic statistics lines."""

    def crash_lines(self) -> tuple[str, ...]:
        """vLLM's engine core hitting a CUDA error in the model's forward while serving."""
        core = f"{PACKAGE}/v1/engine/core.py"
        return (
            "Traceback (most recent call last):",
            f'  File "{core}", line 1022, in run_engine_core',
            "    engine_core.run_busy_loop()",
            f'  File "{core}", line 1049, in run_busy_loop',
            "    self._process_engine_step()",
            f'  File "{core}", line 1074, in _process_engine_step',
            "    outputs, model_executed = self.step_fn()",
            f'  File "{core}", line 448, in step',
            "    model_output = self.model_executor.execute_model(scheduler_output)",
            f'  File "{PACKAGE}/v1/worker/gpu_model_runner.py", line 3387, in execute_model',
            "    model_output = self._model_forward(",
            "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        )

    def new_metrics(self) -> ServerMetrics:
        # the chain's length: every verify pass checks num_speculative_tokens drafted tokens
        chain = max(0, self.num_draft_tokens - 1)
        return VLLMMetrics(speculative=self.speculative, num_draft_tokens=chain)

    _stats_at: float | None = None
    _stats_prev: tuple[int, int, int, int] = (0, 0, 0, 0)

    def _log_step(self, result: StepResult) -> None:
        now = time.monotonic()
        if self._stats_at is None:
            self._stats_at, self._stats_prev = now, self._totals()
        if now - self._stats_at < STATS_INTERVAL_S * self.serve_scale:
            return
        totals = self._totals()
        old = self._stats_prev
        prompt, generated, drafts, accepted = (n - o for n, o in zip(totals, old, strict=True))
        span = (now - self._stats_at) / self.serve_scale
        stats = self.engine.stats
        self.log.rank(
            f"Engine 000: Avg prompt throughput: {prompt / span:.1f} tokens/s, "
            f"Avg generation throughput: {generated / span:.1f} tokens/s, "
            f"Running: {stats.running} reqs, Waiting: {stats.queued} reqs, "
            f"GPU KV cache usage: {100 * stats.token_usage:.1f}%, Prefix cache hit rate: 0.0%"
        )
        chain = max(0, self.num_draft_tokens - 1)
        if self.speculative and drafts > 0 and chain > 0:
            drafted = drafts * chain
            self.log.rank(
                f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
                f"Accepted throughput: {accepted / span:.2f} tokens/s, "
                f"Drafted throughput: {drafted / span:.2f} tokens/s, "
                f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
                f"Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%"
            )
        self._stats_at, self._stats_prev = now, totals

    def _totals(self) -> tuple[int, int, int, int]:
        s = self.engine.stats
        return (
            s.prompt_tokens_total,
            s.generation_tokens_total,
            s.verify_ct_total,
            s.accepted_drafts_total,
        )


class VLLMProcess(SimProcess):
    """One run of the simulated vLLM server (see the module docstring)."""

    def __init__(self, launch: LaunchArgs, log: SGLangLog, *, env: Mapping[str, str]) -> None:
        self.launch = launch
        self.log = log
        self.env = env
        self.profile = load_profile(launch.sim.profile)
        self.resolution = resolve_vllm_launch(
            launch, memory_gib=self.profile.hardware.memory_gib, env=env
        )
        self.max_model_len = int(
            launch.args.get("max_model_len") or self.profile.model.context_length
        )
        self.model = SimModel(self.profile, engine="vllm", max_model_len=self.max_model_len)
        self.plan = self.model.plan_startup(self.resolution.config, env=env)
        self._stop = asyncio.Event()

    def _runtime(self, engine: ServingEngine) -> ServingRuntime:
        sim = self.launch.sim
        return VLLMRuntime(
            engine,
            log=self.log,
            dialect=sim.dialect,
            decode_log_interval=1,
            num_draft_tokens=self.resolution.num_draft_tokens,
            faults=sim.faults,
            on_fatal=self._die,
            serve_scale=sim.serve_scale,
        )

    async def _become_ready(self, server: SimServer, runtime: ServingRuntime) -> bool:
        """vLLM's API server lists its routes; then uvicorn's lines, the last of them
        ``Application startup complete.``, once ``/health`` answers 200."""
        a = self.resolution.server_args
        host, port = a["host"], a["port"]
        shown = f"[{host}]" if ":" in host else host
        self.log.main(f"Starting vLLM API server 0 on http://{shown}:{port}")
        self.log.main("Available routes are:")
        for route in _ROUTES:
            methods = "POST" if route.endswith("completions") else "GET"
            self.log.main(f"Route: {route}, Methods: {methods}")
        server.ready = True
        for line in uvicorn_started_lines(host, port, os.getpid())[:3]:
            self.log.main(line)
        return not self._stop.is_set()

    def _uvicorn_log_config(self) -> dict[str, Any]:
        config = uvicorn_log_config(access_log=True)
        tag = f"(APIServer pid={os.getpid()}) "
        config["formatters"]["default"]["fmt"] = tag + "%(levelprefix)s %(message)s"
        config["formatters"]["access"]["fmt"] = (
            tag + '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
        )
        return config

    def _info(self, seed: int, *, graph_max_bs: int) -> ServerInfo:
        """What vLLM's endpoints report: the served name, ``max_model_len``, the API key."""
        a, res = dict(self.resolution.server_args), self.resolution
        names = a.get("served_model_name") or [a["model"]]
        return ServerInfo(
            model_path=a["model"],
            served_model_name=names[0],
            architecture=self.profile.model.architecture,
            context_length=self.max_model_len,
            vocab_size=self.profile.model.vocab_size,
            server_args=a,
            version=VERSION,
            api_key=a.get("api_key"),
            enable_metrics=True,
            seed=seed,
            memory_usage={},
            max_running_requests=self.plan.max_running_requests,
            num_draft_tokens=res.num_draft_tokens,
            speculative=res.config.speculative,
            engine="vllm",
        )

    def _die(self, lines: Sequence[str], code: int) -> None:
        """A crash while serving: the engine core's fatal error, the API server's dead engine."""
        self.log.record(engine("ERROR", "core.py:843", "EngineCore encountered a fatal error.\n"
                               + "\n".join(lines)))  # fmt: skip
        self.log.record(
            api("ERROR", "async_llm.py:480", "AsyncLLM output_handler failed.\n"
                "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                "See stack trace (above) for the root cause.")
        )  # fmt: skip
        os._exit(code)
