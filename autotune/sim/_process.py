"""One run of the simulated SGLang server: start-up, serving, shutdown.

:class:`SimProcess` prints the start-up phases of the model's plan, dies the way the plan says
when it crashes, and otherwise serves HTTP with uvicorn over a :class:`ServingRuntime` until
SIGTERM or SIGINT. Its hooks (the serving loop, how it becomes ready, uvicorn's logging, what the
endpoints report) are where the simulated vLLM process differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import uvicorn

from autotune.sim._args import LaunchArgs, resolve_launch
from autotune.sim._engine import ServingEngine
from autotune.sim._logging import SGLangLog, uvicorn_log_config, uvicorn_started_lines
from autotune.sim._model import SimModel
from autotune.sim._profile import load_profile
from autotune.sim._responses import ServerInfo
from autotune.sim._runtime import ServingRuntime
from autotune.sim._server import SimServer
from autotune.sim._startup import startup_timings, timings_line

READY_LINE = "The server is fired up and ready to roll!"
_SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
_WARMUP_PROMPT_TOKENS = 6  # "The capital city of France is", SGLang's warm-up prompt


class SimProcess:
    """One run of the simulated server: start-up, serving, shutdown."""

    def __init__(self, launch: LaunchArgs, log: SGLangLog, *, env: Mapping[str, str]) -> None:
        self.launch = launch
        self.log = log
        self.env = env
        self.profile = load_profile(launch.sim.profile)
        self.model = SimModel(self.profile)
        self.resolution = resolve_launch(
            launch,
            architecture=self.profile.model.architecture,
            env=env,
            resolve=self.model.resolve,
        )
        self.plan = self.model.plan_startup(
            self.resolution.config,
            env=env,
            reserved_gib=self.resolution.reserved_gib,
            shown=self._shown_args(),
        )
        self._stop = asyncio.Event()

    def _shown_args(self) -> dict[str, Any]:
        """The resolved arguments the ``server_args=`` line prints beside the fraction: the
        speculative ones as SGLang set them (NGRAM's steps of 0 included) and the graph batch
        under the release's own name."""
        a = self.resolution.server_args
        graph_key = (
            "cuda_graph_max_bs"
            if self.launch.sim.dialect == "0.5.3"
            else ("cuda_graph_max_bs_decode")
        )
        names = (
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            graph_key,
        )
        shown = {k: a.get(k) for k in names}
        if self.launch.sim.dialect == "0.5.17":
            shown["mm_feature_transport"] = a.get("mm_feature_transport")
        return shown

    def run(self) -> int:
        return asyncio.run(self._main())

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        printed = set(self.resolution.warnings)
        for warning in self.resolution.warnings:
            self.log.main(warning)
        for notice in self.plan.notices:
            if not any(p.startswith(notice.rstrip(".")) for p in printed):
                self.log.main(notice)
        code = await self._start_up()
        if code is not None:
            return code
        return await self._serve()

    async def _pause(self, seconds: float) -> bool:
        """Sleep, or return True at once when the process is asked to stop."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, seconds))
        return self._stop.is_set()

    async def _start_up(self) -> int | None:
        """Print the start-up phases; an exit code when the server does not get to serve."""
        sim, plan = self.launch.sim, self.plan
        scale = sim.time_scale * sim.faults.slow_start
        for phase in plan.phases:
            if await self._pause(phase.duration_s * scale):
                return 0
            for record in phase.lines:
                self.log.record(record)
            if sim.faults.hang_startup and phase.name == "load_weights":
                await self._stop.wait()
                return 0
            if plan.crash is not None and phase.name == plan.crash.after_phase:
                for record in plan.crash.lines:
                    self.log.record(record)
                return plan.crash.exit_code
        return 0 if self._stop.is_set() else None

    async def _serve(self) -> int:
        a, sim = self.resolution.server_args, self.launch.sim
        seed = sim.seed if sim.seed is not None else a.get("random_seed")
        if seed is None:
            # SGLang draws its seed when none is given: each start of the same configuration
            # then serves with noise of its own, as repeated starts on a real box differ.
            seed = random.SystemRandom().randint(0, 1 << 30)
        engine = self.model.new_engine(
            self.resolution.config, self.plan, noise=sim.noise, seed=seed
        )
        runtime = self._runtime(engine)
        info = self._info(seed, graph_max_bs=engine.max_bs)
        server = SimServer(info, runtime, faults=sim.faults, log=self.log)
        runner = asyncio.create_task(runtime.run())
        uv: uvicorn.Server | None = None
        serving: asyncio.Task[None] | None = None
        try:
            if not sim.faults.refuse_connections:
                try:
                    uv, serving = await self._start_http(server)
                except OSError as e:
                    self.log.main(
                        f"ERROR:    [Errno {e.errno}] error while attempting to bind on address "
                        f"({a['host']!r}, {a['port']}): {(e.strerror or str(e)).lower()}"
                    )
                    return 1
            if not await self._become_ready(server, runtime):
                return 0
            waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._stop.wait())]
            if serving is not None:
                waits.append(serving)
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            waits[0].cancel()
            if self._stop.is_set():
                return 0
            self.log.main("ERROR:    the HTTP server stopped unexpectedly")
            return 1
        finally:
            server.ready = False
            runtime.close()
            if uv is not None and serving is not None:
                uv.should_exit = True
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(serving, timeout=5.0)
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner

    def _runtime(self, engine: ServingEngine) -> ServingRuntime:
        """The serving loop of ``engine``, logging as the imitated server does."""
        a, sim = self.resolution.server_args, self.launch.sim
        return ServingRuntime(
            engine,
            log=self.log,
            dialect=sim.dialect,
            decode_log_interval=a["decode_log_interval"],
            num_draft_tokens=self.resolution.num_draft_tokens,
            faults=sim.faults,
            on_fatal=self._die,
            serve_scale=sim.serve_scale,
        )

    async def _become_ready(self, server: SimServer, runtime: ServingRuntime) -> bool:
        """Once HTTP serves: uvicorn's lines, SGLang's warm-up request, then its ready line;
        False when the process was stopped meanwhile."""
        a = self.resolution.server_args
        timings = self._timings()
        if timings is not None:
            self.log.main(timings_line(timings))
        for line in uvicorn_started_lines(a["host"], a["port"], os.getpid()):
            self.log.main(line)
        if not await self._warm_up(runtime):
            return False
        server.ready = True
        self.log.main(READY_LINE)
        return True

    async def _start_http(self, server: SimServer) -> tuple[uvicorn.Server, asyncio.Task[None]]:
        a = self.resolution.server_args
        host, port = a["host"], a["port"]
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        config = uvicorn.Config(
            server,
            lifespan="off",
            log_config=self._uvicorn_log_config(),
            timeout_graceful_shutdown=1,
        )
        uv = _QuietSignalsServer(config)
        serving = asyncio.create_task(uv.serve(sockets=[sock]))
        while not uv.started and not serving.done():
            await asyncio.sleep(0.005)
        if serving.done():
            serving.result()
            raise OSError(0, "the HTTP server stopped during start-up")
        return uv, serving

    def _uvicorn_log_config(self) -> dict[str, Any]:
        return uvicorn_log_config(access_log=True)

    async def _warm_up(self, runtime: ServingRuntime) -> bool:
        """SGLang's warm-up generation; False when the process was stopped meanwhile."""
        state = runtime.submit(_WARMUP_PROMPT_TOKENS, 8, 0.0, counted=False)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            while True:
                events = asyncio.ensure_future(runtime.next_events(state))
                await asyncio.wait({events, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not events.done():
                    events.cancel()
                    return False
                got = events.result()
                if got is None:
                    return False
                if any(e.finished for e in got):
                    return not self._stop.is_set()
        finally:
            stop.cancel()

    def _timings(self) -> dict[str, Any] | None:
        """The start-up durations the imitated release reports (0.5.17 and newer), or None."""
        if self.launch.sim.dialect == "0.5.3":
            return None
        return startup_timings(self.plan, speculative=self.resolution.config.speculative)

    def _info(self, seed: int, *, graph_max_bs: int) -> ServerInfo:
        """What the endpoints report: the server args as SGLang resolved them, and more."""
        p, plan, res = self.profile, self.plan, self.resolution
        a = dict(res.server_args)
        if a.get("random_seed") is None:
            a["random_seed"] = seed  # resolved, as SGLang reports the seed it drew
        mem = plan.memory
        a["max_running_requests"] = plan.max_running_requests
        if mem is not None:
            a["mem_fraction_static"] = mem.mem_fraction_static
        a["tokenizer_path"] = a.get("tokenizer_path") or a["model_path"]
        a["served_model_name"] = a.get("served_model_name") or a["model_path"]
        a["context_length"] = a.get("context_length") or p.model.context_length
        old_dialect = self.launch.sim.dialect == "0.5.3"
        graph_key = "cuda_graph_max_bs" if old_dialect else "cuda_graph_max_bs_decode"
        a[graph_key] = a.get(graph_key) or graph_max_bs
        timings = self._timings()
        if timings is not None:
            a["startup_time"] = timings
        return ServerInfo(
            model_path=a["model_path"],
            served_model_name=a["served_model_name"],
            architecture=p.model.architecture,
            context_length=a["context_length"],
            vocab_size=p.model.vocab_size,
            server_args=a,
            version=self.launch.sim.dialect,
            api_key=a.get("api_key"),
            enable_metrics=bool(a.get("enable_metrics")),
            seed=seed,
            memory_usage={
                "weight": round(mem.target_weights_gib + mem.draft_weights_gib, 2),
                "kvcache": round(mem.kv_pool_gib, 2),
                "token_capacity": mem.kv_tokens,
                "graph": round(mem.graph_gib, 2),
            }
            if mem is not None
            else {},
            max_running_requests=plan.max_running_requests,
            num_draft_tokens=res.num_draft_tokens,
            speculative=res.config.speculative,
            stream_interval=max(1, int(a.get("stream_interval") or 1)),
        )

    def _die(self, lines: Sequence[str], code: int) -> None:
        """A crash while serving: print what SGLang prints and end the process at once."""
        self.log.record("\n".join(lines))
        self.log.record(_SIGQUIT)
        os._exit(code)


class _QuietSignalsServer(uvicorn.Server):
    """Uvicorn without its own signal handling: the simulated server handles SIGTERM itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield
