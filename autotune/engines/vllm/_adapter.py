"""The vLLM adapter: a configuration in canonical knobs -> ``vllm serve MODEL ...`` argv and env.

vLLM's knobs, spelled its way: speculative decoding is one ``--speculative-config`` JSON object
(``method`` ``eagle3``/``eagle``/``mtp``/``ngram``/``draft_model``, the draft ``model``,
``num_speculative_tokens`` from ``speculative_num_steps``, ``draft_tensor_parallel_size``); memory
is ``--gpu-memory-utilization`` (the share of each GPU's whole memory, not SGLang's static pool
share); ``max_running_requests`` is ``--max-num-seqs``, ``chunked_prefill_size`` the step token
budget ``--max-num-batched-tokens``, ``cuda_graph_max_bs`` the largest captured batch in the
release's spelling, ``disable_cuda_graph`` ``--enforce-eager``, ``page_size`` ``--block-size``.
Knobs vLLM has no flag for (EAGLE top-k above 1, SGLang's draft-token budget, SGLang's
``mem_fraction_static``, all-reduce modes other than its custom kernel and NCCL) are refused
before any launch, naming the knob and what vLLM offers instead.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from autotune._errors import ConfigError, EngineError
from autotune._knobs import SPECULATIVE_NUMBERS, Infeasible, ServerConfig
from autotune._launch import LaunchSpec
from autotune.engines._base import Engine, Hardware, LoadSchedule
from autotune.engines.sglang._hardware import nvml_hardware
from autotune.engines.vllm._crashes import VLLM_CRASH_RULES
from autotune.engines.vllm._flags import VLLMFlags, detect_flags, known_flags
from autotune.engines.vllm._schedule import batch_schedule, schedule_refusal
from autotune.engines.vllm._section import owned_flag, read_vllm_section
from autotune.engines.vllm._serving import READINESS, VLLM_API

if TYPE_CHECKING:
    from autotune._document import Section
    from autotune._workload import WorkloadSpec
    from autotune.crashes import CrashRules
    from autotune.engines._serving import ServerApi
    from autotune.engines._spec import EngineSpec
    from autotune.server import Readiness

#: ``--speculative-config`` ``method`` of each canonical speculative algorithm vLLM runs.
METHODS: Mapping[str, str] = MappingProxyType(
    {
        "EAGLE3": "eagle3",
        "EAGLE": "eagle",
        "NEXTN": "mtp",
        "NGRAM": "ngram",
        "STANDALONE": "draft_model",
    }
)
#: Methods that load the draft model of ``engine.draft_model_path``.
DRAFT_METHODS = ("eagle3", "eagle", "draft_model")
#: All-reduce modes vLLM is told by flag, and the NCCL algorithm forced for each.
_ALLREDUCE: Mapping[str, tuple[tuple[str, ...], Mapping[str, str]]] = MappingProxyType(
    {
        "custom": ((), {}),
        "nccl": (("--disable-custom-all-reduce",), {}),
        "nccl_tree": (("--disable-custom-all-reduce",), {"NCCL_ALGO": "Tree"}),
        "nccl_ring": (("--disable-custom-all-reduce",), {"NCCL_ALGO": "Ring"}),
    }
)
#: Knobs with one value flag each.
_VALUE_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "gpu_memory_utilization": "--gpu-memory-utilization",
        "max_running_requests": "--max-num-seqs",
        "chunked_prefill_size": "--max-num-batched-tokens",
        "page_size": "--block-size",
        "attention_backend": "--attention-backend",
    }
)
_NO_BUDGET = (
    "{release} has no draft-token budget (SGLang's speculative_num_draft_tokens): a chain "
    "verifies num_speculative_tokens + 1 tokens; tune speculative_num_steps instead"
)
#: The module ``vllm serve`` runs, for an interpreter named by ``engine.python``.
CLI_MODULE = "vllm.entrypoints.cli.main"


def knob_problem(flags: VLLMFlags, spec: EngineSpec, config: ServerConfig, knob: str) -> str | None:
    """Why ``flags``' release cannot run ``knob`` of ``config`` as given, else ``None``."""
    value = getattr(config, knob)
    release = flags.release
    if knob == "speculative_eagle_topk":
        if value is not None and value != 1:
            return (
                f"{release} has no EAGLE top-k: it drafts one chain of num_speculative_tokens "
                f"(top-k 1), so speculative_eagle_topk={value} cannot be launched; "
                "tune speculative_num_steps instead"
            )
    elif knob == "speculative_num_draft_tokens":
        steps = config.speculative_num_steps
        if value is not None and (steps is None or value != steps + 1):
            return _NO_BUDGET.format(release=release)
    elif knob == "mem_fraction_static":
        if value is not None:
            return (
                f"{release} has no static memory fraction (SGLang's mem_fraction_static); its "
                "memory knob is gpu_memory_utilization, the share of each GPU's whole memory"
            )
    elif knob == "speculative_algorithm":
        if config.speculative and value not in METHODS:
            return f"{release} has no speculative method for {value}"
    elif knob == "allreduce":
        if value not in _ALLREDUCE:
            return (
                f"{release} has no all-reduce mode {value} among its flags "
                "(it runs its custom all-reduce kernel, or NCCL with --disable-custom-all-reduce)"
            )
    elif knob == "cuda_graph_max_bs":
        if value is not None and graph_flag(flags) is None:
            return f"{release} has neither --max-cudagraph-capture-size nor --cuda-graph-sizes"
    elif knob == "chunked_prefill_size" and value is not None and value < 1:
        return (
            f"{release} always chunks prefills: chunked_prefill_size={value} (no chunking) "
            "cannot be launched; give the step token budget (--max-num-batched-tokens)"
        )
    if knob in _VALUE_FLAGS and value is not None:
        flag = _VALUE_FLAGS[knob]
        if not flags.accepts(flag, str(value)):
            what = "has no flag" if not flags.has(flag) else "does not accept"
            shown = flag if not flags.has(flag) else f"{flag} {value}"
            return f"{release} {what} {shown} ({flags.source}), needed for {knob}"
    return None


def graph_flag(flags: VLLMFlags) -> str | None:
    """The flag of ``flags``' release that sets the largest CUDA-graph batch."""
    for flag in ("--max-cudagraph-capture-size", "--cuda-graph-sizes"):
        if flags.has(flag):
            return flag
    return None


def speculative_config(spec: EngineSpec, config: ServerConfig) -> dict[str, Any]:
    """The ``--speculative-config`` object of ``config`` (speculation on)."""
    method = METHODS[config.speculative_algorithm]
    out: dict[str, Any] = {"method": method}
    if method in DRAFT_METHODS and spec.draft_model_path:
        out["model"] = spec.draft_model_path
    if config.speculative_num_steps is not None:
        out["num_speculative_tokens"] = config.speculative_num_steps
    if method in DRAFT_METHODS:
        out["draft_tensor_parallel_size"] = config.tp_size
    return out


def build_serve_args(
    flags: VLLMFlags, spec: EngineSpec, config: ServerConfig, *, port: int
) -> tuple[list[str], dict[str, str]]:
    """What follows ``vllm serve``: the model, then the options of ``config``; env to add.

    Raises:
        EngineError: a knob ``flags``' release cannot express (the message names it).
    """
    for knob in ServerConfig.knob_names():
        problem = knob_problem(flags, spec, config, knob)
        if problem is not None:
            raise EngineError(
                f"cannot launch {knob}={getattr(config, knob)!r}: {problem}",
                hint="remove that choice from the space, or use a vLLM release that has it",
            )
    args = [spec.model_path, "--host", spec.host, "--port", str(port)]
    args += ["--tensor-parallel-size", str(config.tp_size)]
    if config.speculative:
        args += ["--speculative-config", json.dumps(speculative_config(spec, config))]
    for knob, flag in _VALUE_FLAGS.items():
        value = getattr(config, knob)
        if value is not None:
            args += [flag, repr(value) if isinstance(value, float) else str(value)]
    graph = graph_flag(flags)
    if config.cuda_graph_max_bs is not None and graph is not None:
        args += [graph, str(config.cuda_graph_max_bs)]
    if config.disable_cuda_graph:
        args.append("--enforce-eager")
    words, env = _ALLREDUCE[config.allreduce]
    return args + list(words), dict(env)


class VLLMEngine(Engine):
    """Launches ``vllm serve`` in the flags of the release that will run.

    ``flags`` fixes the release's flags (tests, tools); otherwise they come from
    ``spec.vllm_version`` (autotune's table) or are read once from the installed vLLM.
    """

    kind = "vllm"
    family = "vLLM"
    speculative_numbers = ("speculative_num_steps",)
    simulator = ("sim-vllm", "vllm")

    def __init__(self, spec: EngineSpec, *, flags: VLLMFlags | None = None) -> None:
        super().__init__(spec)
        self._fixed = flags
        self._detected: VLLMFlags | None = None

    @classmethod
    def read_section(cls, sec: Section, spec: EngineSpec, *, base: Path) -> EngineSpec:
        return read_vllm_section(sec, spec, base=base)

    @classmethod
    def owned_flag(cls, arg: str) -> tuple[str, str] | None:
        return owned_flag(arg)

    @classmethod
    def spec_note(cls, spec: EngineSpec) -> str | None:
        return f"vLLM {spec.vllm_version} flags" if spec.vllm_version else None

    @classmethod
    def with_release(cls, spec: EngineSpec, release: str) -> EngineSpec | None:
        return replace(spec, vllm_version=release)

    @property
    def python(self) -> str:
        """``engine.python``, else this interpreter (``python3`` behind a launch prefix)."""
        if self.spec.python:
            return self.spec.python
        return "python3" if self.spec.launch_prefix else sys.executable

    def flags(self) -> VLLMFlags:
        """The flags of the vLLM release that will run (read from it on first use).

        Raises:
            EngineError: no table of ``engine.vllm_version``, or vLLM cannot be imported.
        """
        if self._fixed is not None:
            return self._fixed
        if self.spec.vllm_version:
            return known_flags(self.spec.vllm_version)
        if self._detected is None:
            self._detected = detect_flags(self.python, self.spec.launch_prefix, env=self.spec.env)
        return self._detected

    def describe(self) -> str:
        flags = self.flags()
        return f"{flags.release} ({flags.source})"

    def check_installed(self) -> None:
        self.flags()

    def build_launch(
        self, config: ServerConfig, *, port: int, workload: WorkloadSpec | None = None
    ) -> LaunchSpec:
        args, knob_env = build_serve_args(self.flags(), self.spec, config, port=port)
        argv = [*self.spec.launch_prefix, self.python, "-m", CLI_MODULE, "serve", *args]
        argv += self.spec.extra_args
        return self.spec.launch(argv, knob_env, port)

    def precheck(self, config: ServerConfig) -> Infeasible | None:
        flags = self.flags()
        for knob in ServerConfig.knob_names():
            problem = knob_problem(flags, self.spec, config, knob)
            if problem is not None:
                return Infeasible(problem, category="bad_args", knob=knob)
        return None

    def unsupported_values(self, knob: str, values: Iterable[Any]) -> dict[Any, str]:
        if knob not in ServerConfig.knob_names():
            raise ConfigError(
                f"unknown knob {knob!r}",
                hint="known knobs: " + ", ".join(ServerConfig.knob_names()),
            )
        flags = self.flags()
        out: dict[Any, str] = {}
        for value in values:
            params: dict[str, Any] = {knob: value}
            if knob in SPECULATIVE_NUMBERS:
                params["speculative_algorithm"] = "EAGLE3"
            try:
                config = ServerConfig.from_params(params)
            except ConfigError as e:
                out[value] = e.message
                continue
            problem = knob_problem(flags, self.spec, config, knob)
            if knob == "speculative_num_draft_tokens" and value is not None:
                problem = _NO_BUDGET.format(release=flags.release)  # not a knob of its own
            if problem is not None:
                out[value] = problem
        return out

    def hardware(self) -> Hardware:
        """The GPUs of this machine, read with NVML (None fields without a GPU or driver)."""
        return nvml_hardware()

    # --- rules ------------------------------------------------------------------------------
    def check_rules(self, config: ServerConfig) -> Infeasible | None:
        """vLLM's own refusals: speculative numbers without a method, a draft method without a
        draft model, an EAGLE chain without its length, and the knobs it lacks."""
        if not config.speculative:
            for knob in SPECULATIVE_NUMBERS:
                if getattr(config, knob) is not None:
                    return Infeasible(
                        f"speculative numbers without a method: {knob} is set but "
                        "speculative_algorithm is none",
                        category="bad_args",
                        knob=knob,
                    )
            return None
        for knob in ("speculative_eagle_topk", "speculative_num_draft_tokens"):
            problem = knob_problem(self.flags(), self.spec, config, knob)
            if problem is not None:
                return Infeasible(problem, category="bad_args", knob=knob)
        method = METHODS.get(config.speculative_algorithm)
        if method in DRAFT_METHODS and config.speculative_num_steps is None:
            return Infeasible(
                f"no chain length: the {method} method needs num_speculative_tokens "
                "(speculative_num_steps)",
                category="bad_args",
                knob="speculative_num_steps",
            )
        return None

    def draft_token_bounds(self, steps: int, topk: int) -> tuple[int, int]:
        """A chain of ``steps`` drafted tokens verifies them and the token before: fixed."""
        return steps + 1, steps + 1

    def lacks_draft_model(self, algorithm: str) -> bool:
        return self.spec.draft_model_path is None and METHODS.get(algorithm) in DRAFT_METHODS

    # --- one server that follows a load mix ----------------------------------------------
    def schedule_refusal(self, config: ServerConfig) -> str | None:
        """Why ``config`` cannot be one batch size's choice of vLLM's speculative-token
        schedule (:mod:`._schedule`)."""
        return schedule_refusal(self.flags().version, config, _method)

    def load_schedule(
        self, choices: Sequence[tuple[int, ServerConfig]], base: ServerConfig
    ) -> LoadSchedule:
        """One ``vllm serve`` whose ``--speculative-config`` schedules the winners' numbers of
        speculative tokens by batch size (:mod:`._schedule`)."""

        def launch(config: ServerConfig) -> tuple[list[str], Callable[[Sequence[str]], str]]:
            spec = self.build_launch(config, port=self.spec.port)
            return list(spec.argv), lambda argv: replace(spec, argv=tuple(argv)).display()

        return batch_schedule(self.flags().version, choices, base, method=_method, launch=launch)

    def readiness(self) -> Readiness:
        return READINESS

    def crash_rules(self) -> CrashRules:
        return VLLM_CRASH_RULES

    def server_api(self) -> ServerApi:
        return VLLM_API


def _method(config: ServerConfig) -> str | None:
    """The ``--speculative-config`` method of ``config`` (None: none vLLM runs)."""
    return METHODS.get(config.speculative_algorithm or "")
