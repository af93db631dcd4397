"""The SGLang adapter: a configuration in canonical knobs -> ``sglang serve`` argv and env.

Flags move between SGLang releases, so every knob is spelled through a :class:`FlagSet` of the
release that will run: detected from the user's SGLang (``engine.python`` behind
``engine.launch_prefix``) or taken from autotune's table when ``engine.sglang_version`` names the
release. A knob the release cannot express is refused before launch (``precheck``) rather than
launched as something else. What SGLang would otherwise change silently is set explicitly: the
running-request cap under speculation, and FlashInfer's automatic all-reduce fusion when another
all-reduce mode is asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from autotune._errors import ConfigError, EngineError
from autotune._knobs import SPECULATIVE_NUMBERS, Infeasible, ServerConfig
from autotune._launch import LaunchSpec
from autotune.engines._base import Hardware
from autotune.engines._spec import EngineSpec
from autotune.engines.sglang._adaptive import ADAPTIVE_FLAG
from autotune.engines.sglang._detect import detect_flagset
from autotune.engines.sglang._dialects import SPEC_V2_ENV, FlagSet, known_flagset
from autotune.engines.sglang._hardware import nvml_hardware
from autotune.engines.sglang._rules import (
    DRAFT_MODEL_ALGORITHMS,
    NGRAM_BREADTH_FLAG,
    OPTIONAL_DRAFT_ALGORITHMS,
    SGLangRules,
    max_running_requests_for,
)
from autotune.engines.sglang._section import read_sglang_section

if TYPE_CHECKING:
    from autotune._document import Section
    from autotune._workload import WorkloadSpec

#: Environment variable NCCL reads for a forced algorithm, per all-reduce mode.
_NCCL_ALGO: Mapping[str, str] = MappingProxyType({"nccl_tree": "Tree", "nccl_ring": "Ring"})
_SINGLE_FLAG_MODES: Mapping[str, str] = MappingProxyType(
    {
        "nccl": "--disable-custom-all-reduce",
        "nccl_tree": "--disable-custom-all-reduce",
        "nccl_ring": "--disable-custom-all-reduce",
        "torch_symm_mem": "--enable-torch-symm-mem",
        "nccl_symm": "--enable-symm-mem",
        "mscclpp": "--enable-mscclpp",
    }
)
_FUSION_OFF = "--enforce-disable-flashinfer-allreduce-fusion"
#: The spellings of the decode CUDA-graph batch-size cap, the current one first.
_GRAPH_BS_SPELLINGS = ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
_SIMPLE_VALUE_KNOBS: Mapping[str, str] = MappingProxyType(
    {
        "mem_fraction_static": "--mem-fraction-static",
        "chunked_prefill_size": "--chunked-prefill-size",
        "page_size": "--page-size",
    }
)


@dataclass
class Spelling:
    """How one knob is written for one release: argv words and environment, or why it cannot be."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    missing: str | None = None


def spell_knob(
    flags: FlagSet,
    spec: EngineSpec,
    config: ServerConfig,
    knob: str,
    *,
    workload: WorkloadSpec | None = None,
) -> Spelling:
    """The argv words and environment that set ``knob`` of ``config`` in ``flags``' release."""
    out = Spelling()

    def need(flag: str, value: str | None = None) -> bool:
        if value is None and flags.has(flag):
            return True
        if value is not None and flags.accepts(flag, value):
            return True
        shown = flag if value is None else f"{flag} {value}"
        what = "has no flag" if not flags.has(flag) else "does not accept"
        out.missing = f"{flags.release} {what} {shown} ({flags.source}), needed for {knob}"
        return False

    value = getattr(config, knob)
    if knob == "tp_size":
        if need("--tp-size"):
            out.args += ["--tp-size", str(value)]
    elif knob == "speculative_algorithm":
        if config.speculative and need("--speculative-algorithm", value):
            out.args += ["--speculative-algorithm", value]
            draft = spec.draft_model_path
            takes_draft = value in (*DRAFT_MODEL_ALGORITHMS, *OPTIONAL_DRAFT_ALGORITHMS)
            if draft and takes_draft and need("--speculative-draft-model-path"):
                out.args += ["--speculative-draft-model-path", draft]
    elif knob in SPECULATIVE_NUMBERS:
        flag = "--" + knob.replace("_", "-")
        if knob == "speculative_eagle_topk" and config.speculative_algorithm == "NGRAM":
            flag = NGRAM_BREADTH_FLAG
        if config.speculative and value is not None and need(flag):
            out.args += [flag, str(value)]
    elif knob == "cuda_graph_max_bs":
        if value is not None:
            # 0.5.14 split it per phase; later releases brought the old name back as a
            # deprecated alias (PR #38265): the spelling the release does not deprecate wins.
            flag = flags.preferred(*_GRAPH_BS_SPELLINGS) or _GRAPH_BS_SPELLINGS[0]
            if need(flag):
                out.args += [flag, str(value)]
    elif knob == "disable_cuda_graph":
        if value:
            if flags.accepts("--cuda-graph-backend-decode", "disabled"):
                out.args += ["--cuda-graph-backend-decode", "disabled"]
                if flags.accepts("--cuda-graph-backend-prefill", "disabled"):
                    out.args += ["--cuda-graph-backend-prefill", "disabled"]
            elif need("--disable-cuda-graph"):
                out.args.append("--disable-cuda-graph")
    elif knob == "max_running_requests":
        cap = max_running_requests_for(config, workload)
        if cap is not None and need("--max-running-requests"):
            out.args += ["--max-running-requests", str(cap)]
    elif knob == "attention_backend":
        if value is not None and need("--attention-backend", value):
            out.args += ["--attention-backend", value]
    elif knob == "allreduce":
        _spell_allreduce(flags, value, out, need)
    elif knob == "speculative_adaptive":
        if value and config.speculative and need(ADAPTIVE_FLAG):
            out.args.append(ADAPTIVE_FLAG)
    elif knob == "spec_v2":
        if value is not None and config.speculative:
            if SPEC_V2_ENV in flags.env_vars:
                out.env[SPEC_V2_ENV] = "True" if value else "False"
            else:
                out.missing = (
                    f"{flags.release} ({flags.source}) reads no {SPEC_V2_ENV}, needed for "
                    "spec_v2 (releases 0.5.5 to 0.5.13 choose the speculative worker with it; "
                    "later ones always run the v2 worker)"
                )
    elif knob == "gpu_memory_utilization":
        if value is not None:
            out.missing = (
                f"{flags.release} has no share of the whole GPU memory ({knob} is vLLM's knob); "
                "SGLang's memory knob is mem_fraction_static"
            )
    elif knob in _SIMPLE_VALUE_KNOBS:
        flag = _SIMPLE_VALUE_KNOBS[knob]
        if value is not None and need(flag):
            out.args += [flag, repr(value) if isinstance(value, float) else str(value)]
    else:
        raise ConfigError(
            f"unknown knob {knob!r}", hint="known knobs: " + ", ".join(ServerConfig.knob_names())
        )
    if out.missing is not None:
        out.args, out.env = [], {}
    return out


def _spell_allreduce(flags: FlagSet, mode: str, out: Spelling, need: Callable[[str], bool]) -> None:
    if mode == "flashinfer_fusion":
        if flags.accepts("--flashinfer-allreduce-fusion-backend", "auto"):
            out.args += ["--flashinfer-allreduce-fusion-backend", "auto"]
        elif need("--enable-flashinfer-allreduce-fusion"):
            out.args.append("--enable-flashinfer-allreduce-fusion")
        return
    if mode in _SINGLE_FLAG_MODES and need(_SINGLE_FLAG_MODES[mode]):
        out.args.append(_SINGLE_FLAG_MODES[mode])
    if mode in _NCCL_ALGO:
        out.env["NCCL_ALGO"] = _NCCL_ALGO[mode]
    # Releases that enable FlashInfer fusion by themselves on some GPUs and models get told not
    # to, so that the mode recorded is the mode that runs.
    if flags.has(_FUSION_OFF):
        out.args.append(_FUSION_OFF)


def build_server_args(
    flags: FlagSet,
    spec: EngineSpec,
    config: ServerConfig,
    *,
    port: int,
    workload: WorkloadSpec | None = None,
) -> tuple[list[str], dict[str, str]]:
    """SGLang's options for ``config`` (what follows ``-m sglang.launch_server``) and env to add.

    ``--enable-metrics`` is always passed. ``spec.extra_args`` are not included.

    Raises:
        EngineError: a knob ``flags``' release cannot express (the message names the flag).
    """
    args = ["--model-path", spec.model_path, "--host", spec.host, "--port", str(port)]
    env: dict[str, str] = {}
    knobs = ServerConfig.knob_names()
    for knob in ("tp_size", *(k for k in knobs if k != "tp_size")):
        spelled = spell_knob(flags, spec, config, knob, workload=workload)
        if spelled.missing is not None:
            raise EngineError(
                f"cannot launch {knob}={getattr(config, knob)!r}: {spelled.missing}",
                hint="remove that choice from the space, or use an SGLang release that has it",
            )
        args += spelled.args
        env.update(spelled.env)
    if flags.has("--enable-metrics"):
        args.append("--enable-metrics")
    return args, env


def first_missing(flags: FlagSet, spec: EngineSpec, config: ServerConfig) -> Infeasible | None:
    """The first knob of ``config`` that ``flags``' release cannot express, as a refusal."""
    for knob in ServerConfig.knob_names():
        spelled = spell_knob(flags, spec, config, knob)
        if spelled.missing is not None:
            return Infeasible(spelled.missing, category="bad_args", knob=knob)
    return None


def unsupported_in(
    flags: FlagSet, spec: EngineSpec, knob: str, values: Iterable[Any]
) -> dict[Any, str]:
    """The values of ``knob`` that ``flags``' release cannot express, with the reason each.

    Raises:
        ConfigError: ``knob`` is not a canonical knob name.
    """
    if knob not in ServerConfig.knob_names():
        raise ConfigError(
            f"unknown knob {knob!r}", hint="known knobs: " + ", ".join(ServerConfig.knob_names())
        )
    out: dict[Any, str] = {}
    for value in values:
        params: dict[str, Any] = {knob: value}
        if knob in (*SPECULATIVE_NUMBERS, "speculative_adaptive", "spec_v2"):
            params["speculative_algorithm"] = "EAGLE3"
        try:
            config = ServerConfig.from_params(params)
        except ConfigError as e:
            out[value] = e.message
            continue
        spelled = spell_knob(flags, spec, config, knob)
        if spelled.missing is not None:
            out[value] = spelled.missing
    return out


class SGLangEngine(SGLangRules):
    """Launches ``sglang serve`` (or ``python -m sglang.launch_server``, see :func:`entrypoint`)
    in the flags of the release that will run.

    ``flags`` fixes the release's flag set (tests, tools); otherwise it comes from
    ``spec.sglang_version`` (autotune's table) or is detected once per interpreter and prefix.
    """

    kind = "sglang"

    def __init__(self, spec: EngineSpec, *, flags: FlagSet | None = None) -> None:
        super().__init__(spec)
        self._fixed = flags
        self._detected: dict[tuple[tuple[str, ...], str], FlagSet] = {}

    @classmethod
    def read_section(cls, sec: Section, spec: EngineSpec, *, base: Path) -> EngineSpec:
        """The model folders and the interpreter, checked on this machine (``check_paths``)."""
        return read_sglang_section(sec, spec, base=base)

    @classmethod
    def spec_note(cls, spec: EngineSpec) -> str | None:
        return f"SGLang {spec.sglang_version} flags" if spec.sglang_version else None

    @classmethod
    def with_release(cls, spec: EngineSpec, release: str) -> EngineSpec | None:
        return replace(spec, sglang_version=release)

    def lacks_draft_model(self, algorithm: str) -> bool:
        return self.spec.draft_model_path is None and algorithm in DRAFT_MODEL_ALGORITHMS

    @property
    def python(self) -> str:
        """The interpreter that runs the server: ``engine.python``, else this one (or ``python3``
        behind a launch prefix, where this interpreter's path means nothing)."""
        if self.spec.python:
            return self.spec.python
        return "python3" if self.spec.launch_prefix else sys.executable

    def flagset(self) -> FlagSet:
        """The flag set of the SGLang release that will run (detected on first use).

        Raises:
            EngineError: SGLang cannot be imported by the interpreter (detection only).
        """
        if self._fixed is not None:
            return self._fixed
        if self.spec.sglang_version:
            return known_flagset(self.spec.sglang_version)
        key = (tuple(self.spec.launch_prefix), self.python)
        found = self._detected.get(key)
        if found is None:
            found = detect_flagset(self.python, self.spec.launch_prefix, env=self.spec.env)
            self._detected[key] = found
        return found

    def describe(self) -> str:
        flags = self.flagset()
        return f"{flags.release} ({flags.source})"

    def check_installed(self) -> None:
        self.flagset()

    def build_launch(
        self, config: ServerConfig, *, port: int, workload: WorkloadSpec | None = None
    ) -> LaunchSpec:
        flags = self.flagset()
        args, knob_env = build_server_args(flags, self.spec, config, port=port, workload=workload)
        argv = [*self.spec.launch_prefix, *entrypoint(flags, self.python), *args]
        argv += self.spec.extra_args
        return self.spec.launch(argv, knob_env, port)

    def precheck(self, config: ServerConfig) -> Infeasible | None:
        return first_missing(self.flagset(), self.spec, config)

    def unsupported_values(self, knob: str, values: Iterable[Any]) -> dict[Any, str]:
        return unsupported_in(self.flagset(), self.spec, knob, values)

    def hardware(self) -> Hardware:
        """The GPUs of this machine, read with NVML (None fields without a GPU or driver)."""
        return nvml_hardware()

    def draft_in_static(self) -> bool:
        """From 0.5.14 the draft's weights are part of ``--mem-fraction-static`` (SGLang PRs
        #28683, #28855); before, the KV pool was sized before the draft was loaded."""
        return self.flagset().counts_draft_in_static

    def weights_gib(self, algorithm: str | None = None) -> tuple[float | None, float | None]:
        """Checkpoint sizes on disk (``*.safetensors``, else ``*.bin``) of local model folders."""
        target = _checkpoint_gib(self.spec.model_path)
        draft = None
        name = None if algorithm is None else algorithm.upper()
        own = self.spec.draft_model_path != self.spec.model_path  # NEXTN may name the target
        if (
            name is None
            or name in DRAFT_MODEL_ALGORITHMS
            or (name in OPTIONAL_DRAFT_ALGORITHMS and own)
        ):
            draft = _checkpoint_gib(self.spec.draft_model_path)
        return target, draft


def entrypoint(flags: FlagSet, python: str) -> list[str]:
    """How ``python`` starts the server of ``flags``' release: ``sglang serve`` (the release's
    ``sglang`` console script, run by that interpreter) where detection found it, else
    ``-m sglang.launch_server``, which every release runs (0.5.5 and newer warn that
    ``sglang serve`` is recommended)."""
    if flags.serve_script:
        return [python, flags.serve_script, "serve"]
    return [python, "-m", "sglang.launch_server"]


def _checkpoint_gib(path: str | None) -> float | None:
    if not path:
        return None
    root = Path(path).expanduser()
    if not root.is_dir():
        return None
    try:
        for pattern in ("*.safetensors", "*.bin"):
            files = [p for p in root.rglob(pattern) if p.is_file()]
            if files:
                return sum(p.stat().st_size for p in files) / 2**30
    except OSError:
        return None
    return None
