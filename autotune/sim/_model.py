"""The simulator's model, usable without any process or socket.

:class:`SimModel` answers three questions for one configuration on one profile: what happens at
start-up (:meth:`SimModel.plan_startup`), how the server serves (:meth:`SimModel.new_engine`, the
engine the simulated server paces in real time), and what a benchmark of a workload would measure
(:meth:`SimModel.evaluate`, the same engine run in virtual time against a closed-loop client).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from autotune._knobs import ServerConfig
from autotune._stats import percentile
from autotune._workload import WorkloadSpec
from autotune.sim._acceptance import AcceptanceModel
from autotune.sim._engine import ServingEngine
from autotune.sim._memory import max_bs_of
from autotune.sim._profile import Profile, load_profile
from autotune.sim._startup import StartupPlanner
from autotune.sim._timing import StepTimer
from autotune.sim._types import Crash, SimRequest, StartupPlan, Verdict


class SimModel:
    """Memory, start-up, step-time and acceptance model of one profile."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._planner = StartupPlanner(profile)

    @classmethod
    def from_profile(cls, name_or_path: str) -> SimModel:
        return cls(load_profile(name_or_path))

    # --- start-up --------------------------------------------------------------------------
    def resolve(self, config: ServerConfig) -> ServerConfig:
        """``config`` with what SGLang chooses itself: the automatic speculative numbers.

        With speculation on and no speculative numbers, SGLang picks (steps, top-k, draft
        tokens) = (5, 4, 8) for Llama and Grok models and (3, 1, 4) for the others.
        """
        if not config.speculative or config.speculative_num_steps is not None:
            return config
        arch = self.profile.model.architecture
        steps, topk, draft = (5, 4, 8) if ("Llama" in arch or "Grok" in arch) else (3, 1, 4)
        return config.replace(
            speculative_num_steps=steps,
            speculative_eagle_topk=topk,
            speculative_num_draft_tokens=draft,
        )

    def plan_startup(
        self, config: ServerConfig, *, env: Mapping[str, str] | None = None
    ) -> StartupPlan:
        """Phases, log lines and the crash (if any) of a server started with ``config``."""
        env = env or {}
        config = self.resolve(config)
        if config.speculative and self.profile.draft(config.speculative_algorithm) is None:
            return self._no_draft(config)
        devices = self._device_failure(config, env)
        if devices is not None:
            return devices
        return self._planner.plan(config, env)

    def _device_failure(self, config: ServerConfig, env: Mapping[str, str]) -> StartupPlan | None:
        """SGLang's failure when fewer GPUs are visible than tensor parallelism needs."""
        available = self.profile.hardware.gpu_count
        visible = env.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            available = min(available, len([d for d in visible.split(",") if d.strip()]))
        if config.tp_size <= available:
            return None
        line = (
            "RuntimeError: No CUDA GPUs are available"
            if available == 0
            else "torch.AcceleratorError: CUDA error: invalid device ordinal"
        )
        record = (
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/'
            'model_runner.py", line 398, in __init__\n'
            "    torch.get_device_module(self.device).set_device(self.gpu_id)\n"
            f"{line}"
        )
        init = self._planner.plan(config.replace(tp_size=1, speculative_algorithm="none"), env)
        crash = Crash("other_crash", line, (record,), init.phases[0].name)
        return StartupPlan((init.phases[0],), crash, None, 0, not config.disable_cuda_graph)

    def _no_draft(self, config: ServerConfig) -> StartupPlan:
        heads = ", ".join(self.profile.drafts) or "none"
        line = (
            f"ValueError: speculative algorithm {config.speculative_algorithm} needs a draft "
            f"model this deployment does not provide (draft heads: {heads})"
        )
        init = self._planner.plan(config.replace(speculative_algorithm="none"), {}).phases[0]
        crash = Crash("bad_args", line, (line,), init.name)
        return StartupPlan((init,), crash, None, 0, not config.disable_cuda_graph)

    # --- serving ---------------------------------------------------------------------------
    def acceptance(
        self, config: ServerConfig, *, temperature: float = 0.0, scale: float | None = None
    ) -> AcceptanceModel | None:
        if not config.speculative:
            return None
        config = self.resolve(config)
        draft = self.profile.draft(config.speculative_algorithm)
        if draft is None:
            return None
        depth = max(1, config.speculative_num_steps or 1)
        if scale is None:
            scale = self.profile.acceptance_scale.get(self.profile.default_workload_name, 1.0)
        return AcceptanceModel.build(
            draft.acceptance, depth=depth, temperature=temperature, scale=scale
        )

    def new_engine(
        self,
        config: ServerConfig,
        plan: StartupPlan,
        *,
        noise: float = 0.0,
        seed: int = 0,
        acceptance_scale: float | None = None,
    ) -> ServingEngine:
        """The serving engine of a server that started with ``plan``."""
        config = self.resolve(config)
        if plan.memory is None or plan.crash is not None:
            raise ValueError("a server that did not start cannot serve")
        return ServingEngine(
            timer=StepTimer(self.profile, config),
            kv_tokens=plan.memory.kv_tokens,
            max_running=plan.max_running_requests,
            max_bs=max_bs_of(self.profile, config),
            cuda_graph=plan.cuda_graph,
            chunk=config.chunked_prefill_size or self.profile.runtime.default_chunked_prefill,
            acceptance=self.acceptance(config, scale=acceptance_scale),
            acceptance_for=lambda t: self.acceptance(config, temperature=t, scale=acceptance_scale),
            noise=noise,
            seed=seed,
        )

    # --- evaluation ------------------------------------------------------------------------
    def evaluate(
        self,
        config: ServerConfig,
        workload: WorkloadSpec | None = None,
        *,
        env: Mapping[str, str] | None = None,
    ) -> Verdict:
        """Start-up verdict and, when it starts, the benchmark a client would measure.

        The workload runs in virtual time against a closed-loop client (``concurrency``
        requests in flight, or Poisson arrivals at ``request_rate``), from the first send to
        the last completion, with the workload's own request lengths.
        """
        workload = workload or self.profile.default_workload
        plan = self.plan_startup(config, env=env)
        if plan.crash is not None:
            return Verdict(
                status=plan.crash.category,
                output_tok_s=None,
                accept_length=None,
                accept_rate=None,
                startup_s=plan.duration_s,
                benchmark_s=None,
                failure_line=plan.crash.failure_line,
                kv_tokens=None if plan.memory is None else plan.memory.kv_tokens,
                max_running_requests=plan.max_running_requests,
                mean_running=None,
            )
        scale = self.profile.acceptance_scale.get(workload.name)
        config = self.resolve(config)
        engine = self.new_engine(config, plan, acceptance_scale=scale)
        return _VirtualRun(engine, workload, config).run(plan)


class _VirtualRun:
    """A closed-loop benchmark client against the engine, in virtual time."""

    def __init__(self, engine: ServingEngine, workload: WorkloadSpec, config: ServerConfig):
        self.engine = engine
        self.workload = workload
        self.config = config

    def run(self, plan: StartupPlan) -> Verdict:
        wl = self.workload
        lengths = wl.sample_lengths()
        engine = self.engine
        rng = random.Random(f"{wl.seed}:arrivals")
        now = 0.0
        pending = list(enumerate(lengths))
        pending.reverse()
        next_arrival = 0.0
        in_flight: dict[str, int] = {}
        start: dict[int, float] = {}
        first: dict[int, float] = {}
        last_event: dict[int, float] = {}
        finish: dict[int, float] = {}
        itl: list[float] = []
        verify_ct = 0
        completion = 0
        proposed = 0
        accepted_total = 0
        busy_time = 0.0
        running_area = 0.0
        n_draft = self.config.speculative_num_draft_tokens or 0

        def send(index: int, at: float) -> None:
            prompt, out = lengths[index]
            rid = f"r{index}"
            in_flight[rid] = index
            start[index] = at
            engine.submit(SimRequest(rid, prompt, out, wl.temperature))

        def top_up(at: float) -> None:
            nonlocal next_arrival
            if wl.request_rate is None:
                while pending and len(in_flight) < wl.concurrency:
                    send(pending.pop()[0], at)
                return
            while pending and next_arrival <= at + 1e-12 and len(in_flight) < wl.concurrency:
                send(pending.pop()[0], max(at, next_arrival))
                next_arrival += rng.expovariate(wl.request_rate)

        top_up(now)
        guard = 0
        while in_flight or pending:
            guard += 1
            if guard > 10_000_000:
                break
            if not engine.has_work():
                if not pending:
                    break
                now = max(now, next_arrival)
                top_up(now)
                if not engine.has_work():
                    break
                continue
            max_cycles = 1_000_000
            if wl.request_rate is not None and pending:
                max_cycles = 1  # arrivals may come between steps
            result = engine.step(max_cycles=max_cycles)
            if result.kind == "idle":
                if wl.request_rate is not None and pending:
                    now = max(now, next_arrival)
                    top_up(now)
                    continue
                break
            now += result.duration_s
            busy_time += result.duration_s
            running_area += result.running * result.duration_s
            for ev in result.events:
                index = in_flight.get(ev.rid)
                if index is None:
                    continue
                if index not in first:
                    first[index] = now
                elif ev.new_tokens > 0:
                    itl.append(now - last_event[index])
                last_event[index] = now
                completion += ev.new_tokens
                verify_ct += ev.verify
                accepted_total += ev.accepted_drafts
                proposed += ev.verify * max(0, n_draft - 1)
                if ev.finished:
                    finish[index] = now
                    del in_flight[ev.rid]
            top_up(now)
        done = sorted(finish)
        if not done:
            return Verdict(
                status="ok",
                output_tok_s=0.0,
                accept_length=None,
                accept_rate=None,
                startup_s=plan.duration_s,
                benchmark_s=0.0,
                failure_line=None,
                kv_tokens=None if plan.memory is None else plan.memory.kv_tokens,
                max_running_requests=plan.max_running_requests,
                mean_running=0.0,
            )
        t0 = min(start[i] for i in done)
        t1 = max(finish[i] for i in done)
        duration = max(1e-9, t1 - t0)
        out_tokens = sum(lengths[i][1] for i in done)
        in_tokens = sum(lengths[i][0] for i in done)
        ttfts = sorted(first[i] - start[i] for i in done)
        accept_length = completion / verify_ct if verify_ct else None
        accept_rate = accepted_total / proposed if proposed else None
        return Verdict(
            status="ok",
            output_tok_s=out_tokens / duration,
            accept_length=accept_length,
            accept_rate=accept_rate,
            startup_s=plan.duration_s,
            benchmark_s=duration,
            failure_line=None,
            kv_tokens=None if plan.memory is None else plan.memory.kv_tokens,
            max_running_requests=plan.max_running_requests,
            mean_running=running_area / busy_time if busy_time > 0 else 0.0,
            ttft_p99_ms=percentile(ttfts, 99) * 1000.0,
            itl_p99_ms=percentile(itl, 99) * 1000.0 if itl else None,
            total_tok_s=(out_tokens + in_tokens) / duration,
            request_throughput=len(done) / duration,
            details={
                "completed": float(len(done)),
                "kv_pool_gib": plan.memory.kv_pool_gib if plan.memory else 0.0,
                "mem_fraction_static": plan.memory.mem_fraction_static if plan.memory else 0.0,
            },
        )
