"""The start-up of a simulated server: SGLang's phases, log lines and crashes.

Durations come from the profile (the seed system: about 584 s of weight loading, 12-13 minutes
in all); messages are SGLang's own wording (facts file, section 4), crash messages the ones real
servers print, so that the crash classifier reads a simulated log exactly like a real one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune._knobs import ServerConfig
from autotune.sim._memory import MemoryVerdict, capture_sizes, gib_str, mib_ceil, plan_memory
from autotune.sim._profile import Profile
from autotune.sim._types import Crash, StartupPhase, StartupPlan

_PKG = "/usr/local/lib/python3.12/dist-packages/sglang/srt"

_SCHEDULER_FRAMES = (
    f'  File "{_PKG}/managers/scheduler.py", line 2937, in run_scheduler_process\n'
    "    scheduler = Scheduler(\n"
    f'  File "{_PKG}/managers/scheduler.py", line 346, in __init__\n'
    "    self.init_model_worker()\n"
    f'  File "{_PKG}/managers/tp_worker.py", line 246, in __init__\n'
    "    self._init_model_runner()\n"
    f'  File "{_PKG}/managers/tp_worker.py", line 330, in _init_model_runner\n'
    "    self._model_runner = ModelRunner(\n"
    f'  File "{_PKG}/model_executor/model_runner.py", line 412, in __init__\n'
    "    self.initialize(min_per_gpu_memory)\n"
)

_SIGQUIT = "Received sigquit from a child process. It usually means the child failed."

_GRAPH_SOLUTIONS = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose"
)

#: Failures of all-reduce modes, by the name a profile gives them.
_MODE_FAILURES: dict[str, tuple[str, str, str]] = {
    # name: (category, phase, exception line)
    "torch_symm_mem_arch": (
        "unsupported_arch",
        "init",
        "RuntimeError: torch symmetric memory all-reduce is not supported on this GPU: "
        "compute capability {cc} is not in its architecture table (supported: 9.0, 10.0)",
    ),
    "flashinfer_jit_arch": (
        "graph_capture_other",
        "cuda_graph",
        "Exception: Capture cuda graph failed: No supported CUDA architectures found for major "
        "versions [9, 10].",
    ),
    "nccl_tree_graph": (
        "graph_capture_other",
        "cuda_graph",
        "Exception: Capture cuda graph failed: operation not permitted when stream is capturing "
        "(NCCL_ALGO=Tree launches collectives that cannot be captured)",
    ),
    "nvls_no_nvlink": (
        "nccl_error",
        "init",
        "RuntimeError: NCCL error: unhandled system error (NVLS needs NVLink/NVSwitch; "
        "run with NCCL_DEBUG=INFO for details)",
    ),
}


class StartupPlanner:
    """Builds the :class:`StartupPlan` of one configuration on one profile."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile

    def plan(
        self,
        config: ServerConfig,
        env: Mapping[str, str],
        *,
        reserved_gib: float = 0.0,
        shown: Mapping[str, Any] | None = None,
    ) -> StartupPlan:
        """``reserved_gib``: memory another part of the server takes from the KV pool
        (:func:`autotune.sim._memory.plan_memory`); ``shown``: the server arguments as the
        launch resolved them, printed in the ``server_args=`` line (else taken from
        ``config``)."""
        p = self.profile
        mem = plan_memory(p, config, reserved_gib=reserved_gib)
        graphs = not config.disable_cuda_graph
        notices: list[str] = []
        max_running = self._max_running(config, mem)
        if config.speculative and config.max_running_requests is None:
            notices.append("Max running requests is reset to 48 for speculative decoding.")
        phases: list[StartupPhase] = [self._init_phase(config, mem.plan.mem_fraction_static, shown)]
        crash = self._mode_failure(config, env, graphs, "init")
        if crash is None:
            phases.append(self._weights_phase(config, mem))
            if mem.failure == "weights":
                crash = self._oom_runtime(mem, "load_weights", "loading the weights")
        if crash is None:
            phases.append(self._kv_phase(config, mem))
            if mem.failure == "kv_pool":
                crash = self._oom_kv(mem)
        if crash is None and graphs:
            phases.append(self._graph_phase(config, mem))
            crash = self._mode_failure(config, env, graphs, "cuda_graph")
            if crash is None and mem.failure == "graph":
                crash = self._oom_graph(mem)
        if crash is None:
            phases.append(self._final_phase(config, mem, max_running))
            crash = self._mode_failure(config, env, graphs, "warmup")
            if crash is None and mem.failure == "activations":
                crash = self._oom_runtime(mem, "warmup", "the warm-up prefill")
        if crash is not None and crash.after_phase not in {ph.name for ph in phases}:
            crash = Crash(crash.category, crash.failure_line, crash.lines, phases[-1].name)
        return StartupPlan(
            phases=tuple(phases),
            crash=crash,
            memory=mem.plan,
            max_running_requests=max_running,
            cuda_graph=graphs,
            notices=tuple(notices),
        )

    # --- phases ----------------------------------------------------------------------------
    def _max_running(self, config: ServerConfig, mem: MemoryVerdict) -> int:
        if config.max_running_requests is not None:
            return config.max_running_requests
        if config.speculative:
            return 48
        return min(self.profile.runtime.default_max_running_requests, max(1, mem.plan.kv_tokens))

    def init_phase(
        self, config: ServerConfig, shown: Mapping[str, Any] | None = None
    ) -> StartupPhase:
        """The first phase of a start of ``config``: its arguments and the distributed init."""
        fraction = plan_memory(self.profile, config).plan.mem_fraction_static
        return self._init_phase(config, fraction, shown)

    def _init_phase(
        self, config: ServerConfig, fraction: float, shown: Mapping[str, Any] | None = None
    ) -> StartupPhase:
        # SGLang prints its arguments once they are resolved: the automatic fraction as chosen,
        # the speculative algorithm and numbers as launched (None where speculation is off)
        p = self.profile
        spec = config.speculative
        args: dict[str, Any] = {
            "speculative_algorithm": config.speculative_algorithm if spec else None,
            "speculative_num_steps": config.speculative_num_steps if spec else None,
            "speculative_eagle_topk": config.speculative_eagle_topk if spec else None,
            "speculative_num_draft_tokens": config.speculative_num_draft_tokens if spec else None,
            "cuda_graph_max_bs": config.cuda_graph_max_bs,
        }
        if shown is not None:
            args = dict(shown)
        listed = "".join(f"{k}={v!r}, " for k, v in args.items())
        lines = [
            f"server_args=ServerArgs(model_path='{p.model.name}', tp_size={config.tp_size}, "
            f"mem_fraction_static={fraction}, {listed}...)",
        ]
        if p.startup.slow_tokenizer:
            warn = (
                f"{_PKG}/utils/hf_transformers_utils.py:558: UserWarning: Using a slow "
                "tokenizer. This might cause a significant slowdown. Consider using a fast "
                "tokenizer instead.\n  warnings.warn("
            )
            lines.extend([warn] * min(8, config.tp_size + 1))
        lines.append("Init torch distributed begin.")
        if config.tp_size > 1 and config.allreduce in p.hardware.allreduce:
            asked = p.hardware.allreduce[config.allreduce]
            if asked.falls_back_to is not None:
                lines.append(
                    f"{config.allreduce} all-reduce is not used on this machine ({asked.why}); "
                    f"falling back to {asked.falls_back_to}."
                )
        lines.append(f"Init torch distributed ends. mem usage={p.hardware.context_gib:.2f} GB")
        return StartupPhase("init", p.startup.init_s, tuple(lines))

    def _weights_phase(self, config: ServerConfig, mem: MemoryVerdict) -> StartupPhase:
        p = self.profile
        m = mem.plan
        avail0 = m.total_gib - m.context_gib - m.reserved_gib
        lines = [f"Load weight begin. avail mem={gib_str(avail0)} GB"]
        duration = p.startup.weight_load_s
        if mem.failure == "weights":
            return StartupPhase("load_weights", duration * 0.6, tuple(lines))
        avail1 = avail0 - m.target_weights_gib
        lines.append(
            f"Load weight end. elapsed={duration:.2f} s, type={p.model.architecture}, "
            f"avail mem={gib_str(avail1)} GB, mem usage={gib_str(m.target_weights_gib)} GB."
        )
        draft = p.draft(config.speculative_algorithm) if config.speculative else None
        if draft is not None and not draft.table:  # an n-gram table loads no model
            duration += p.startup.draft_load_s
            avail2 = avail1 - m.draft_weights_gib
            lines.append(f"Load weight begin. avail mem={gib_str(avail1)} GB")
            lines.append(
                f"Load weight end. elapsed={p.startup.draft_load_s:.2f} s, "
                f"type={draft.architecture}, avail mem={gib_str(avail2)} GB, "
                f"mem usage={gib_str(m.draft_weights_gib)} GB."
            )
        return StartupPhase("load_weights", duration, tuple(lines))

    def _kv_phase(self, config: ServerConfig, mem: MemoryVerdict) -> StartupPhase:
        m = mem.plan
        if mem.failure == "kv_pool":
            return StartupPhase("kv_pool", 1.0, ())
        lines = [
            f"KV Cache is allocated. #tokens: {m.kv_tokens}, KV size: {gib_str(m.kv_pool_gib)} GB",
            f"Memory pool end. avail mem={gib_str(m.free_after_static_gib)} GB",
        ]
        return StartupPhase("kv_pool", self.profile.startup.kv_alloc_s, tuple(lines))

    def _graph_phase(self, config: ServerConfig, mem: MemoryVerdict) -> StartupPhase:
        st = self.profile.startup
        m = mem.plan
        sizes = capture_sizes(mem.max_bs)
        per_size = st.graph_capture_per_size_s * (3.0 if config.speculative else 1.0)
        duration = st.graph_capture_base_s + per_size * len(sizes)
        lines = [
            "Capture cuda graph begin. This can take up to several minutes. "
            f"avail mem={gib_str(m.free_after_static_gib)} GB",
            f"Capture cuda graph bs {sizes}",
        ]
        if mem.failure == "graph" and mem.failing_bs is not None:
            done = [s for s in sizes if s < mem.failing_bs]
            duration = st.graph_capture_base_s + per_size * (len(done) + 1)
            return StartupPhase("cuda_graph", duration, tuple(lines))
        avail = m.free_after_static_gib - m.graph_gib
        lines.append(
            f"Capture cuda graph end. Time elapsed: {duration:.2f} s. "
            f"mem usage={gib_str(m.graph_gib)} GB. avail mem={gib_str(avail)} GB."
        )
        return StartupPhase("cuda_graph", duration, tuple(lines))

    def _final_phase(self, config: ServerConfig, mem: MemoryVerdict, running: int) -> StartupPhase:
        p = self.profile
        chunk = config.chunked_prefill_size or p.runtime.default_chunked_prefill
        m = mem.plan
        lines = [
            f"max_total_num_tokens={m.kv_tokens}, chunked_prefill_size={chunk}, "
            f"max_prefill_tokens=16384, max_running_requests={running}, "
            f"context_len={p.model.context_length}, "
            f"available_gpu_mem={gib_str(m.free_after_static_gib - m.graph_gib)} GB",
        ]
        return StartupPhase("warmup", p.startup.warmup_s, tuple(lines))

    # --- crashes ---------------------------------------------------------------------------
    def _mode_failure(
        self, config: ServerConfig, env: Mapping[str, str], graphs: bool, phase: str
    ) -> Crash | None:
        if config.tp_size <= 1:
            return None
        mode = self.profile.hardware.allreduce.get(config.allreduce)
        if mode is None:
            return None
        name = mode.failure or (mode.failure_with_graphs if graphs else None)
        if name is None:
            return None
        category, at, line = _MODE_FAILURES[name]
        if at == "cuda_graph" and not graphs:
            # without graphs the kernel fails at its first use, in the warm-up
            at, category = "warmup", "unsupported_arch"
            line = line.replace("Exception: Capture cuda graph failed: ", "RuntimeError: ")
        if at != phase:
            return None
        cc = self.profile.hardware.compute_capability
        line = line.format(cc=f"{cc[0]}.{cc[1]}")
        frames = _SCHEDULER_FRAMES
        body = f"Scheduler hit an exception: Traceback (most recent call last):\n{frames}"
        if at == "cuda_graph":
            body += (
                f'  File "{_PKG}/model_executor/model_runner.py", line 2103, in init_cuda_graphs\n'
                "    self.graph_runner = CudaGraphRunner(self)\n"
                f'  File "{_PKG}/model_executor/runner/decode_cuda_graph_runner.py", line 402, '
                "in __init__\n    raise Exception(\n"
                f"{line}\n{_GRAPH_SOLUTIONS}"
            )
        else:
            body += f"{line}"
        return Crash(category, line, (body, _SIGQUIT), at)

    def _oom_kv(self, mem: MemoryVerdict) -> Crash:
        m = mem.plan
        line = (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: mem_fraction_static={m.mem_fraction_static}"
        )
        body = (
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            f"{_SCHEDULER_FRAMES}"
            f'  File "{_PKG}/model_executor/model_runner.py", line 589, in initialize\n'
            "    self.init_memory_pool(min_per_gpu_memory)\n"
            f'  File "{_PKG}/model_executor/pool_configurator.py", line 188, in configure\n'
            "    raise RuntimeError(\n"
            f"{line}"
        )
        return Crash("oom_kv_pool", line, (body, _SIGQUIT), "kv_pool")

    def _oom_graph(self, mem: MemoryVerdict) -> Crash:
        m = mem.plan
        rt = self.profile.runtime
        free_mib = max(2.0, (m.free_after_static_gib - rt.activation_gib) * 1024 * 0.05)
        alloc = mib_ceil(max(0.05, mem.shortfall_gib))
        line = (
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate "
            f"{alloc:.2f} MiB. GPU 0 has a total capacity of {m.total_gib:.2f} GiB of which "
            f"{free_mib:.2f} MiB is free. Including non-PyTorch memory, this process has "
            f"{m.total_gib - free_mib / 1024:.2f} GiB memory in use."
        )
        body = (
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            f"{_SCHEDULER_FRAMES}"
            f'  File "{_PKG}/model_executor/model_runner.py", line 2103, in init_cuda_graphs\n'
            "    self.graph_runner = CudaGraphRunner(self)\n"
            f'  File "{_PKG}/model_executor/runner/decode_cuda_graph_runner.py", line 402, '
            "in __init__\n    raise Exception(\n"
            f"{line}\n{_GRAPH_SOLUTIONS}"
        )
        return Crash("oom_cuda_graph", line, (body, _SIGQUIT), "cuda_graph")

    def _oom_runtime(self, mem: MemoryVerdict, phase: str, during: str) -> Crash:
        m = mem.plan
        line = (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{mib_ceil(max(0.05, mem.shortfall_gib)):.2f} MiB. GPU 0 has a total capacity of "
            f"{m.total_gib:.2f} GiB of which 20.00 MiB is free."
        )
        body = (
            f"Scheduler hit an exception ({during}): Traceback (most recent call last):\n"
            f"{_SCHEDULER_FRAMES}"
            f'  File "{_PKG}/model_executor/model_runner.py", line 520, in load_model\n'
            "    self.model = get_model(\n"
            f"{line}"
        )
        return Crash("oom_runtime", line, (body, _SIGQUIT), phase)


def startup_timings(plan: StartupPlan, *, speculative: bool) -> dict[str, Any]:
    """The start-up durations SGLang 0.5.17 reports (``Engine startup timings (s)`` and
    ``/server_info``), from the phases of ``plan``, in the model's seconds.

    ``load_weight`` is the weights phase (target and draft), ``kv_cache_allocation`` the pool's,
    ``scheduler_e2e`` every phase up to the warm-up, ``tokenizer_e2e`` all of them. The model
    has one capture phase: its time is the decode graphs' (``target_verify`` under
    speculation; ``draft_decode`` and ``draft_extend`` get none of it), and it does not model
    the prefill graphs (``prefill`` 0.00; a real 0.5.17 spent 31.8 s of a 104 s cold start on
    58 of them with a tiny model).
    """
    spent = {ph.name: ph.duration_s for ph in plan.phases}
    graphs = spent.get("cuda_graph", 0.0)
    return {
        "load_weight": round(spent.get("load_weights", 0.0), 2),
        "kv_cache_allocation": round(spent.get("kv_pool", 0.0), 2),
        "scheduler_e2e": round(sum(v for k, v in spent.items() if k != "warmup"), 2),
        "cuda_graph": {
            "prefill": 0.0,
            "decode": 0.0 if speculative else round(graphs, 2),
            "target_verify": round(graphs, 2) if speculative else 0.0,
            "draft_prefill": 0.0,
            "draft_decode": 0.0,
            "draft_extend": 0.0,
        },
        "tokenizer_e2e": round(sum(spent.values()), 2),
    }


def timings_line(timings: Mapping[str, Any]) -> str:
    """SGLang 0.5.17's ``Engine startup timings (s): ...`` line of :func:`startup_timings`."""
    graph = ", ".join(f"{k}={v:.2f}" for k, v in timings["cuda_graph"].items())
    return (
        f"Engine startup timings (s): load_weight={timings['load_weight']:.2f}, "
        f"kv_cache_allocation={timings['kv_cache_allocation']:.2f}, "
        f"scheduler_e2e={timings['scheduler_e2e']:.2f}, cuda_graph={{{graph}}}, "
        f"tokenizer_e2e={timings['tokenizer_e2e']:.2f}"
    )
