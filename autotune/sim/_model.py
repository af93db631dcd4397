"""The simulator's model, usable without any process or socket.

:class:`SimModel` answers three questions for one configuration on one profile: what happens at
start-up (:meth:`SimModel.plan_startup`), how the server serves (:meth:`SimModel.new_engine`, the
engine the simulated server paces in real time), and what a benchmark of a workload would measure
(:meth:`SimModel.evaluate`, the same engine run in virtual time against a closed-loop client).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune._knobs import ServerConfig
from autotune._workload import WorkloadSpec
from autotune.sim._acceptance import AcceptanceModel, tree_shape
from autotune.sim._engine import ServingEngine
from autotune.sim._memory import max_bs_of
from autotune.sim._profile import Learning, Profile, load_profile
from autotune.sim._startup import StartupPlanner
from autotune.sim._timing import StepTimer
from autotune.sim._types import Crash, StartupPlan, Verdict
from autotune.sim._virtual import VirtualRun
from autotune.sim._vllm_startup import VLLMStartupPlanner

#: The engines whose rules the model applies: SGLang's (static memory share, EAGLE trees) and
#: vLLM's (a share of the whole GPU, one draft chain).
ENGINES = ("sglang", "vllm")


class SimModel:
    """Memory, start-up, step-time and acceptance model of one profile.

    ``engine`` says whose start-up rules apply: ``sglang`` (its memory accounting and automatic
    choices) or ``vllm`` (:mod:`autotune.sim._vllm_memory`, its defaults, one draft chain).
    """

    def __init__(
        self, profile: Profile, *, engine: str = "sglang", max_model_len: int | None = None
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"no model of engine {engine!r}: one of {', '.join(ENGINES)}")
        self.profile = profile
        self.engine = engine
        self._planner = StartupPlanner(profile)
        self._vllm = VLLMStartupPlanner(profile, max_model_len=max_model_len)

    @classmethod
    def from_profile(cls, name_or_path: str, *, engine: str = "sglang") -> SimModel:
        return cls(load_profile(name_or_path), engine=engine)

    # --- start-up --------------------------------------------------------------------------
    def resolve(self, config: ServerConfig) -> ServerConfig:
        """``config`` with what SGLang chooses itself: the automatic speculative numbers.

        With speculation on and no speculative numbers, SGLang picks (steps, top-k, draft
        tokens) = (5, 4, 8) for Llama and Grok models and (3, 1, 4) for the others. vLLM's
        choices are its defaults (:meth:`resolve_vllm`).
        """
        if self.engine == "vllm":
            return self.resolve_vllm(config)
        if not config.speculative or config.speculative_num_steps is not None:
            return config
        arch = self.profile.model.architecture
        steps, topk, draft = (5, 4, 8) if ("Llama" in arch or "Grok" in arch) else (3, 1, 4)
        return config.replace(
            speculative_num_steps=steps,
            speculative_eagle_topk=topk,
            speculative_num_draft_tokens=draft,
        )

    def resolve_vllm(self, config: ServerConfig) -> ServerConfig:
        """``config`` with vLLM's defaults for this GPU: ``gpu_memory_utilization`` 0.9,
        ``max_num_seqs`` 1024 and ``max_num_batched_tokens`` 8192 on a GPU of 70 GiB or more
        (256 and 2048 below), the largest captured batch ``min(2 * max_num_seqs, 512)``, and a
        draft chain of top-k 1 verifying ``num_speculative_tokens + 1`` tokens."""
        big = self.profile.hardware.memory_gib >= 70
        seqs = config.max_running_requests or (1024 if big else 256)
        steps = config.speculative_num_steps if config.speculative else None
        if config.speculative and steps is None:
            steps = 3
        return config.replace(
            gpu_memory_utilization=(
                0.9 if config.gpu_memory_utilization is None else config.gpu_memory_utilization
            ),
            max_running_requests=seqs,
            chunked_prefill_size=config.chunked_prefill_size or (8192 if big else 2048),
            cuda_graph_max_bs=config.cuda_graph_max_bs or min(512, 2 * seqs),
            speculative_num_steps=steps,
            speculative_eagle_topk=1 if steps else None,
            speculative_num_draft_tokens=steps + 1 if steps else None,
        )

    def plan_startup(
        self,
        config: ServerConfig,
        *,
        env: Mapping[str, str] | None = None,
        reserved_gib: float = 0.0,
        shown: Mapping[str, Any] | None = None,
    ) -> StartupPlan:
        """Phases, log lines and the crash (if any) of a server started with ``config``;
        ``reserved_gib`` is memory another part of the server takes from the KV pool (SGLang
        0.5.17's multimodal feature pool, :func:`autotune.sim._memory.plan_memory`);
        ``shown`` the resolved server arguments its ``server_args=`` line prints."""
        env = env or {}
        config = self.resolve(config)
        if config.speculative and self.profile.draft(config.speculative_algorithm) is None:
            return self._no_draft(config, shown)
        devices = self._device_failure(config, env, shown)
        if devices is not None:
            return devices
        if self.engine == "vllm":
            return self._vllm.plan(config)
        return self._planner.plan(config, env, reserved_gib=reserved_gib, shown=shown)

    def _device_failure(
        self,
        config: ServerConfig,
        env: Mapping[str, str],
        shown: Mapping[str, Any] | None = None,
    ) -> StartupPlan | None:
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
        init = self._planner.init_phase(config, shown)
        crash = Crash("other_crash", line, (record,), init.name)
        return StartupPlan((init,), crash, None, 0, not config.disable_cuda_graph)

    def _no_draft(
        self, config: ServerConfig, shown: Mapping[str, Any] | None = None
    ) -> StartupPlan:
        heads = ", ".join(self.profile.drafts) or "none"
        line = (
            f"ValueError: speculative algorithm {config.speculative_algorithm} needs a draft "
            f"model this deployment does not provide (draft heads: {heads})"
        )
        init = self._planner.init_phase(config, shown)
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
        depth = tree_shape(config)[0]
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
            max_bs=(
                config.cuda_graph_max_bs or 512
                if self.engine == "vllm"
                else max_bs_of(self.profile, config)
            ),
            cuda_graph=plan.cuda_graph,
            chunk=config.chunked_prefill_size or self.profile.runtime.default_chunked_prefill,
            acceptance=self.acceptance(config, scale=acceptance_scale),
            acceptance_for=lambda t: self.acceptance(config, temperature=t, scale=acceptance_scale),
            learning=self._learning(config),
            noise=noise,
            seed=seed,
        )

    def _learning(self, config: ServerConfig) -> Learning | None:
        """How the drafter learns while the server stays up: SGLang's n-gram table grows from
        all the text it serves; vLLM's n-gram proposer looks only at the request's own tokens,
        so it learns nothing across requests."""
        if not config.speculative or self.engine == "vllm":
            return None
        draft = self.profile.draft(config.speculative_algorithm)
        return None if draft is None else draft.learning

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
        the last completion, with the workload's own request lengths; its latency figures are
        those the benchmark client would compute from the chunks streamed every cycle
        (:mod:`autotune.sim._virtual`).
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
        return VirtualRun(engine, workload, config).run(plan)
