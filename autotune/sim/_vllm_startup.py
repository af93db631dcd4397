"""The start-up of a simulated vLLM server: vLLM's phases, log lines and crashes.

Durations come from the profile's start-up section (engine and distributed set-up, weights, the
draft, profiling and KV-cache allocation, CUDA-graph capture) plus ``torch.compile`` unless
``--enforce-eager``; the lines are vLLM's wording: ``Model loading took``, ``Available KV cache
memory``, ``GPU KV cache size``, ``Maximum concurrency for``, ``Graph capturing finished``,
``init engine (profile, create kv cache, warmup model) took``. The crashes are vLLM's own: "No
available memory for the cache blocks", the ``max_model_len`` that the KV cache cannot hold,
CUDA out of memory while loading the weights or capturing graphs, each in the engine core's
traceback followed by the API server's "Engine core initialization failed".
"""

from __future__ import annotations

from autotune._knobs import ServerConfig
from autotune.sim._profile import Profile
from autotune.sim._types import Crash, StartupPhase, StartupPlan
from autotune.sim._vllm_log import api, bare, engine
from autotune.sim._vllm_memory import VLLMMemory, gib2, plan_vllm_memory

VERSION = "0.33.0"
#: Where vLLM lies in the paths of its tracebacks.
PACKAGE = "/usr/local/lib/python3.12/dist-packages/vllm"
#: Seconds of Dynamo's bytecode transform and Inductor's compilation of a cached graph (choice).
_COMPILE_S = 14.0
_KV_ADVICE = (
    "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
    "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
_CORE_FRAMES = (
    "Traceback (most recent call last):\n"
    f'  File "{PACKAGE}/v1/engine/core.py", line 1011, in run_engine_core\n'
    "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)\n"
    f'  File "{PACKAGE}/v1/engine/core.py", line 768, in __init__\n'
    "    super().__init__(\n"
    f'  File "{PACKAGE}/v1/engine/core.py", line 112, in __init__\n'
)
_API_FAILURE = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/bin/vllm", line 10, in <module>\n'
    "    sys.exit(main())\n"
    f'  File "{PACKAGE}/entrypoints/cli/serve.py", line 60, in cmd\n'
    "    uvloop.run(run_server(args))\n"
    f'  File "{PACKAGE}/v1/engine/utils.py", line 1006, in wait_for_engine_startup\n'
    "    raise RuntimeError(\n"
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {}"
)


class VLLMStartupPlanner:
    """Builds the :class:`StartupPlan` of one configuration of a vLLM server on one profile."""

    def __init__(self, profile: Profile, *, max_model_len: int | None = None) -> None:
        self.profile = profile
        self.max_model_len = max_model_len

    def plan(self, config: ServerConfig, *, model: str | None = None) -> StartupPlan:
        p, st = self.profile, self.profile.startup
        mem = plan_vllm_memory(p, config, max_model_len=self.max_model_len)
        name = model or p.model.name
        phases = [StartupPhase("init", st.init_s, self._init_lines(config, mem, name))]
        crash: Crash | None = None
        phases.append(self._weights(config, mem, name))
        if mem.failure == "weights":
            crash = self._oom("load_weights", mem, config, loading=True)
        if crash is None:
            phases.append(self._profile_phase(config, mem))
            if mem.failure in ("no_blocks", "max_model_len"):
                crash = self._kv_crash(mem)
        if crash is None and not config.disable_cuda_graph:
            phases.append(self._graph_phase(config, mem))
            if mem.failure == "graph":
                crash = self._oom("cuda_graph", mem, config, loading=False)
        if crash is None:
            total = sum(ph.duration_s for ph in phases[2:]) + st.warmup_s
            lines = (
                engine(
                    "INFO",
                    "core.py:250",
                    "init engine (profile, create kv cache, warmup model) took "
                    f"{total:.2f} seconds",
                ),
                api(
                    "INFO",
                    "loggers.py:199",
                    f"Engine 000: vllm cache_config_info with initialization after num_gpu_blocks "
                    f"is: {mem.num_blocks}",
                ),
                api("INFO", "api_server.py:1680", "Supported tasks: ['generate']"),
            )
            phases.append(StartupPhase("warmup", st.warmup_s, lines))
        return StartupPlan(
            phases=tuple(phases),
            crash=crash,
            memory=mem.plan,
            max_running_requests=config.max_running_requests or 1024,
            cuda_graph=not config.disable_cuda_graph,
        )

    # --- phases ----------------------------------------------------------------------------
    def _init_lines(self, config: ServerConfig, mem: VLLMMemory, name: str) -> tuple[str, ...]:
        spec = ""
        if config.speculative:
            spec = (
                f"speculative_config=SpeculativeConfig(method='{_method(config)}', "
                f"num_spec_tokens={config.speculative_num_steps}), "
            )
        chunk = config.chunked_prefill_size
        return (
            api("INFO", "api_server.py:1896", f"vLLM API server version {VERSION}"),
            api("INFO", "model.py:547",
                f"Resolved architecture: {self.profile.model.architecture}"),
            api("INFO", "model.py:1510", f"Using max model len {mem.max_model_len}"),
            api("INFO", "scheduler.py:205",
                f"Chunked prefill is enabled with max_num_batched_tokens={chunk}."),
            engine("INFO", "core.py:77",
                   f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{name}', "
                   f"{spec}tensor_parallel_size={config.tp_size}, "
                   f"gpu_memory_utilization={mem.utilization}, "
                   f"enforce_eager={config.disable_cuda_graph}, ..."),
            engine("INFO", "parallel_state.py:1208",
                   "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, "
                   "EP rank 0"),
        )  # fmt: skip

    def _weights(self, config: ServerConfig, mem: VLLMMemory, name: str) -> StartupPhase:
        st, m = self.profile.startup, mem.plan
        lines = [engine("INFO", "gpu_model_runner.py:2602", f"Starting to load model {name}...")]
        if mem.failure == "weights":
            return StartupPhase("load_weights", st.weight_load_s * 0.6, tuple(lines))
        lines.append(
            engine("INFO", "default_loader.py:267", f"Loading weights took {st.weight_load_s:.2f} "
                   "seconds")
        )  # fmt: skip
        duration = st.weight_load_s
        if config.speculative and m.draft_weights_gib > 0:
            duration += st.draft_load_s
            lines.append(engine("INFO", "eagle.py:1101", "Loading drafter model..."))
        lines.append(
            engine("INFO", "gpu_model_runner.py:2653",
                   f"Model loading took {gib2(m.target_weights_gib + m.draft_weights_gib)} GiB "
                   f"memory and {duration + 0.4:.6f} seconds")
        )  # fmt: skip
        return StartupPhase("load_weights", duration, tuple(lines))

    def _profile_phase(self, config: ServerConfig, mem: VLLMMemory) -> StartupPhase:
        st, m = self.profile.startup, mem.plan
        lines: list[str] = []
        duration = st.kv_alloc_s
        if not config.disable_cuda_graph:
            duration += _COMPILE_S
            lines += [
                engine("INFO", "backends.py:548", f"Dynamo bytecode transform time: "
                       f"{_COMPILE_S * 0.4:.2f} s"),
                engine("INFO", "monitor.py:34", f"torch.compile takes {_COMPILE_S:.2f} s in total"),
                engine("INFO", "gpu_model_runner.py:5651",
                       f"Estimated CUDA graph memory: {gib2(mem.graph_estimate_gib)} GiB total"),
            ]  # fmt: skip
        available = mem.utilization * m.total_gib - m.context_gib - m.target_weights_gib
        available -= m.draft_weights_gib + mem.activation_gib + mem.graph_estimate_gib
        lines.append(
            engine("INFO", "gpu_worker.py:456", f"Available KV cache memory: {gib2(available)} GiB")
        )
        if mem.failure in ("no_blocks", "max_model_len"):
            return StartupPhase("kv_cache", duration, tuple(lines))
        tokens = mem.num_blocks * mem.block_size
        lines += [
            engine("INFO", "kv_cache_utils.py:1314", f"GPU KV cache size: {tokens:,} tokens"),
            engine("INFO", "kv_cache_utils.py:1319",
                   f"Maximum concurrency for {mem.max_model_len:,} tokens per request: "
                   f"{tokens / mem.max_model_len:.2f}x"),
        ]  # fmt: skip
        return StartupPhase("kv_cache", duration, tuple(lines))

    def _graph_phase(self, config: ServerConfig, mem: VLLMMemory) -> StartupPhase:
        st = self.profile.startup
        sizes = mem.capture_sizes
        n = len(sizes)
        per_size = st.graph_capture_per_size_s * (2.0 if config.speculative else 1.0)
        duration = st.graph_capture_base_s + per_size * n
        bar = f"| {n}/{n} [00:{int(duration) % 60:02d}<00:00, {n / max(duration, 0.01):.2f}it/s]"
        lines = [
            bare(f"Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########{bar}")
        ]
        if mem.failure == "graph":
            return StartupPhase("cuda_graph", duration, tuple(lines))
        lines.append(bare(f"Capturing CUDA graphs (decode, FULL): 100%|##########{bar}"))
        lines.append(
            engine("INFO", "gpu_model_runner.py:4587",
                   f"Graph capturing finished in {max(1, round(duration))} secs, took "
                   f"{gib2(mem.plan.graph_gib)} GiB")
        )  # fmt: skip
        return StartupPhase("cuda_graph", duration, tuple(lines))

    # --- crashes ---------------------------------------------------------------------------
    def _kv_crash(self, mem: VLLMMemory) -> Crash:
        if mem.failure == "no_blocks":
            line = (
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine. See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
            )
        else:
            available = mem.plan.kv_pool_gib
            line = (
                "ValueError: To serve at least one request with the models's max seq len "
                f"({mem.max_model_len}), ({gib2(mem.needed_gib)} GiB KV cache is needed, which is "
                f"larger than the available KV cache memory ({gib2(available)} GiB). Based on "
                "the available memory, the estimated maximum model length is "
                f"{mem.estimated_max_len}. {_KV_ADVICE}"
            )
        frames = (
            f"{_CORE_FRAMES}"
            "    num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(\n"
            f'  File "{PACKAGE}/v1/engine/core.py", line 238, in _initialize_kv_caches\n'
            "    kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,\n"
            f'  File "{PACKAGE}/v1/core/kv_cache_utils.py", line 1243, in get_kv_cache_configs\n'
            "    check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,\n"
            f'  File "{PACKAGE}/v1/core/kv_cache_utils.py", line 716, in '
            "check_enough_kv_cache_memory\n"
            "    raise ValueError(\n"
            f"{line}"
        )
        return Crash("oom_kv_pool", line, _failure(frames), "kv_cache")

    def _oom(self, phase: str, mem: VLLMMemory, config: ServerConfig, *, loading: bool) -> Crash:
        m = mem.plan
        if loading:
            need = m.context_gib + m.target_weights_gib + m.draft_weights_gib - m.total_gib
            where = (
                f'  File "{PACKAGE}/model_executor/model_loader/base_loader.py", line 49, in '
                "load_model\n    model = initialize_model(vllm_config=vllm_config,\n"
                f'  File "{PACKAGE}/model_executor/layers/linear.py", line 228, in create_weights\n'
                "    weight = Parameter(torch.empty(sum(output_partition_sizes),\n"
            )
            free_mib = 18.0
        else:
            need = m.graph_gib - mem.graph_estimate_gib - m.free_after_static_gib
            where = (
                f'  File "{PACKAGE}/v1/worker/gpu_model_runner.py", line 4560, in capture_model\n'
                "    self._capture_cudagraphs(\n"
                f'  File "{PACKAGE}/compilation/cuda_graph.py", line 205, in __call__\n'
                "    with torch.cuda.graph(cudagraph, pool=self.graph_pool):\n"
            )
            free_mib = max(2.0, m.free_after_static_gib * 1024 * 0.02)
        alloc = max(2.0, round(max(0.05, need) * 1024, 2))
        line = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc:.2f} MiB. "
            f"GPU 0 has a total capacity of {m.total_gib:.2f} GiB of which {free_mib:.2f} MiB "
            "is free. Including non-PyTorch memory, this process has "
            f"{m.total_gib - free_mib / 1024:.2f} GiB memory in use."
        )
        executor = "    self.model_executor = executor_class(vllm_config)\n"
        frames = f"{_CORE_FRAMES}{executor}{where}{line}"
        category = "oom_runtime" if loading else "oom_cuda_graph"
        return Crash(category, line, _failure(frames), phase)


def _failure(frames: str) -> tuple[str, ...]:
    """The engine core's failure record and the API server's."""
    return (
        engine("ERROR", "core.py:1020", f"EngineCore failed to start.\n{frames}"),
        f"apitrace {_API_FAILURE}",
    )


def _method(config: ServerConfig) -> str:
    return {"EAGLE3": "eagle3", "EAGLE": "eagle", "NEXTN": "mtp", "NGRAM": "ngram"}.get(
        config.speculative_algorithm, "draft_model"
    )
