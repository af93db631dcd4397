"""The simulated server's command line: SGLang's ``launch_server`` flags per release, and its rules.

Two flag dialects: ``0.5.23`` (per-phase CUDA-graph flags ``--cuda-graph-max-bs-decode`` /
``-prefill``; ``--cuda-graph-max-bs`` is then ambiguous, exactly as in that release) and ``0.5.3``
(``--cuda-graph-max-bs``, ``--enable-ep-moe``). Abbreviations stay enabled, as in SGLang, so a
prefix of a flag is accepted and a prefix of two flags is an argparse error (exit code 2).

After parsing, :func:`resolve_launch` applies SGLang's own argument rules for speculative decoding
(automatic parameters, the reset of max running requests to 48, the top-k 1 rewrite of the number
of draft tokens, the assertions) and maps the flags to a canonical
:class:`~autotune._knobs.ServerConfig`. A rule that SGLang enforces with an exception raises
:class:`ArgumentRuleError`, whose ``lines`` are the traceback SGLang prints.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune._errors import ConfigError
from autotune._knobs import SPECULATIVE_NUMBERS, ServerConfig
from autotune.sim._faults import FaultPlan, parse_fault
from autotune.sim._logging import argument_traceback

DIALECTS: tuple[str, ...] = ("0.5.23", "0.5.3")
DEFAULT_PROFILE = "rtxpro6000x8-kimi-k2.5"
_PROG = {"0.5.23": "sglang serve", "0.5.3": "launch_server.py"}

_ATTENTION = {
    "0.5.23": (
        "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed",
        "fa3", "fa4", "flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "trtllm_mha",
        "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
    ),
    "0.5.3": (
        "triton", "torch_native", "flex_attention", "cutlass_mla", "fa3", "fa4", "flashinfer",
        "flashmla", "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave",
        "intel_amx", "ascend",
    ),
}  # fmt: skip
#: Attention backends that cannot run speculative decoding (SGLang's attention-backend docs).
_NO_SPEC_ATTENTION = ("fa4", "trtllm_mla", "torch_native", "flex_attention")
_MODELLED_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
_UNMODELLED_ALGORITHMS = ("DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP")
_MTP_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM")
_WIDE_TREE_ARCHITECTURES = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")
_PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")


@dataclass(frozen=True)
class SimSettings:
    """The ``--sim-*`` options: which profile, which release, how fast, which faults."""

    profile: str = DEFAULT_PROFILE
    dialect: str = "0.5.23"
    time_scale: float = 1.0
    noise: float = 0.0
    seed: int | None = None
    faults: FaultPlan = field(default_factory=FaultPlan)


@dataclass(frozen=True)
class LaunchArgs:
    """A parsed command line: SGLang's options by their field names, and the sim's own."""

    args: Mapping[str, Any]
    sim: SimSettings
    #: Deprecation warnings SGLang prints while parsing.
    deprecations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """The launch after SGLang's argument rules: canonical config, warnings, final server args."""

    config: ServerConfig
    warnings: tuple[str, ...]
    server_args: Mapping[str, Any]

    @property
    def num_draft_tokens(self) -> int:
        return int(self.server_args.get("speculative_num_draft_tokens") or 0)


class ArgumentRuleError(ConfigError):
    """SGLang rejected the arguments with an exception; ``lines`` are its traceback."""

    def __init__(self, message: str, lines: Sequence[str]) -> None:
        super().__init__(message)
        self.lines = tuple(lines)
        self.exit_code = 1


class _DeprecatedTrue(argparse.Action):
    """A deprecated boolean flag: stores True and records SGLang's warning."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.new_flag = kwargs.pop("new_flag")
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        namespace.sim_deprecations.append(
            f"'{option_string}' is deprecated and will be removed in a future release. "
            f"Use '{self.new_flag}' instead."
        )
        setattr(namespace, self.dest, True)


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _fault(text: str) -> str:
    try:
        parse_fault(text)
    except ConfigError as e:
        hint = f" ({e.hint})" if e.hint else ""
        raise argparse.ArgumentTypeError(f"{e.message}{hint}") from None
    return text


def build_parser(dialect: str, prog: str | None = None) -> argparse.ArgumentParser:
    """SGLang's launch_server parser of ``dialect`` plus the ``--sim-*`` options."""
    p = argparse.ArgumentParser(prog=prog or _PROG[dialect])
    add = p.add_argument
    add("--model-path", type=str, required=True)
    add("--tokenizer-path", type=str)
    add("--host", type=str, default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--trust-remote-code", action="store_true")
    add("--dtype", choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
        default="auto")  # fmt: skip
    add("--kv-cache-dtype", choices=("auto", "fp8_e5m2", "fp8_e4m3", "bf16"), default="auto")
    add("--quantization", type=str)
    add("--context-length", type=int)
    add("--served-model-name", type=str)
    add("--mem-fraction-static", type=float)
    add("--max-running-requests", type=int)
    add("--chunked-prefill-size", type=int)
    add("--page-size", type=int)
    add("--tensor-parallel-size", "--tp-size", "--tp", dest="tp_size", type=int, default=1)
    add("--pipeline-parallel-size", "--pp-size", dest="pp_size", type=int, default=1)
    add("--expert-parallel-size", "--ep-size", "--ep", dest="ep_size", type=int, default=1)
    add("--data-parallel-size", "--dp-size", dest="dp_size", type=int, default=1)
    add("--random-seed", type=int)
    add("--log-level", type=str, default="info")
    add("--enable-metrics", action="store_true")
    add("--decode-log-interval", type=int, default=40)
    add("--api-key", type=str)
    add("--attention-backend", choices=_ATTENTION[dialect])
    add("--speculative-algorithm", type=str)
    add("--speculative-draft-model-path", "--speculative-draft-model", type=str,
        dest="speculative_draft_model_path")  # fmt: skip
    add("--speculative-num-steps", type=int)
    add("--speculative-eagle-topk", type=int)
    add("--speculative-num-draft-tokens", type=int)
    add("--disable-radix-cache", action="store_true")
    add("--disable-overlap-schedule", action="store_true")
    add("--disable-custom-all-reduce", action="store_true")
    add("--enable-torch-symm-mem", action="store_true")
    add("--enable-symm-mem", action="store_true")
    add("--enable-mscclpp", action="store_true")
    add("--enable-nccl-nvls", action="store_true")
    add("--enable-torch-compile", action="store_true")
    add("--moe-a2a-backend", type=str, default="none")
    add("--disable-cuda-graph-padding", action="store_true")
    if dialect == "0.5.23":
        backends = ("full", "breakable", "disabled")
        add("--cuda-graph-backend-decode", choices=backends)
        add("--cuda-graph-backend-prefill", choices=backends)
        add("--cuda-graph-max-bs-decode", type=int)
        add("--cuda-graph-max-bs-prefill", type=int)
        add("--cuda-graph-bs-decode", type=int, nargs="+")
        add("--cuda-graph-bs-prefill", type=int, nargs="+")
        add("--disable-cuda-graph", action=_DeprecatedTrue,
            new_flag="--cuda-graph-backend-{decode,prefill}=disabled")  # fmt: skip
        add("--flashinfer-allreduce-fusion-backend", choices=("auto", "trtllm", "mnnvl", "cutedsl"))
        add("--enable-flashinfer-allreduce-fusion", action="store_true",
            help="(Deprecated: use --flashinfer-allreduce-fusion-backend=auto)")  # fmt: skip
        add("--enforce-disable-flashinfer-allreduce-fusion", action="store_true")
    else:
        add("--cuda-graph-max-bs", type=int)
        add("--cuda-graph-bs", type=int, nargs="+")
        add("--disable-cuda-graph", action="store_true")
        add("--enable-flashinfer-allreduce-fusion", action="store_true")
        add("--enable-ep-moe", action="store_true")
    sim = p.add_argument_group("simulator options")
    opt = sim.add_argument
    opt("--sim-profile", default=DEFAULT_PROFILE, help="profile name or file")
    opt("--sim-dialect", choices=DIALECTS, default="0.5.23", help="SGLang release to imitate")
    opt("--sim-time-scale", type=_non_negative, default=1.0, help="start-up duration multiplier")
    opt("--sim-noise", type=_non_negative, default=0.0, help="step-time noise (0: none)")
    opt("--sim-seed", type=int, help="seed of the noise and of the output words")
    opt("--sim-fault", type=_fault, action="append", default=[], metavar="FAULT",
        help="hang_startup, slow_start:X, crash_mid_benchmark:N, stall_stream:N, "
        "refuse_connections, garbage:N, http_500:N, drop_connection:N")  # fmt: skip
    return p


def parse_launch_args(argv: Sequence[str], *, prog: str | None = None) -> LaunchArgs:
    """Parse a command line; argparse errors exit with code 2 as SGLang's do."""
    pre = argparse.ArgumentParser(prog=prog or _PROG["0.5.23"], add_help=False)
    pre.add_argument("--sim-dialect", choices=DIALECTS, default="0.5.23")
    known, _ = pre.parse_known_args(list(argv))
    parser = build_parser(known.sim_dialect, prog)
    ns = argparse.Namespace(sim_deprecations=[])
    parser.parse_args(list(argv), namespace=ns)
    values = vars(ns)
    sim = SimSettings(
        profile=values.pop("sim_profile"),
        dialect=values.pop("sim_dialect"),
        time_scale=values.pop("sim_time_scale"),
        noise=values.pop("sim_noise"),
        seed=values.pop("sim_seed"),
        faults=FaultPlan.parse(values.pop("sim_fault")),
    )
    deprecations = tuple(values.pop("sim_deprecations"))
    return LaunchArgs(args=values, sim=sim, deprecations=deprecations)


def resolve_launch(launch: LaunchArgs, *, architecture: str, env: Mapping[str, str]) -> Resolution:
    """Apply SGLang's argument rules and map the flags to a canonical configuration.

    Raises:
        ArgumentRuleError: SGLang would stop with an exception (its traceback is attached).
        ConfigError: an algorithm the simulated server does not model, or a value out of range.
    """
    a = dict(launch.args)
    dialect = launch.sim.dialect
    warnings: list[str] = []
    steps, topk, draft = (a[k] for k in SPECULATIVE_NUMBERS)
    raw_alg = a["speculative_algorithm"]
    algorithm = "none"
    if raw_alg is None:
        if steps is not None or topk is not None or draft is not None:
            raise _rule(dialect, "no_algorithm", "ValueError: speculative_num_steps, "
                        "speculative_eagle_topk and speculative_num_draft_tokens need "
                        "--speculative-algorithm; got them without an algorithm.")  # fmt: skip
    else:
        algorithm = raw_alg.upper()
        if algorithm in _UNMODELLED_ALGORITHMS:
            raise ConfigError(
                f"speculative algorithm {raw_alg!r} is not modelled by the simulated server",
                source="--speculative-algorithm",
                hint="use one of " + ", ".join(_MODELLED_ALGORITHMS),
            )
        if algorithm not in _MODELLED_ALGORITHMS:
            raise _rule(dialect, "unknown_algorithm",
                        f"ValueError: Unknown speculative algorithm name: {raw_alg}")  # fmt: skip
        a["speculative_algorithm"] = "EAGLE" if algorithm == "NEXTN" else algorithm
        if a["max_running_requests"] is None:
            a["max_running_requests"] = 48
            override = " You can override this by explicitly setting --max-running-requests."
            reset = "Max running requests is reset to 48 for speculative decoding."
            warnings.append(reset if dialect == "0.5.3" else reset + override)
        if algorithm == "NGRAM":
            if draft is None:
                draft = 12
                warnings.append("speculative_num_draft_tokens is set to 12 by default for ngram "
                                "speculative decoding. You can override this by explicitly "
                                "setting --speculative-num-draft-tokens.")  # fmt: skip
            topk = topk or 1
            steps = steps or max(1, draft // topk)
        else:
            steps, topk, draft = _eagle_rules(a, algorithm, architecture, warnings, dialect)
        _validate_with_speculation(a, algorithm, dialect)
    a.update(zip(SPECULATIVE_NUMBERS, (steps, topk, draft), strict=True))
    if algorithm in ("EAGLE", "NEXTN") and architecture in _MTP_ARCHITECTURES:
        a["speculative_draft_model_path"] = a["speculative_draft_model_path"] or a["model_path"]
    config = ServerConfig.from_params(
        {
            "speculative_algorithm": algorithm,
            "speculative_num_steps": steps,
            "speculative_eagle_topk": topk,
            "speculative_num_draft_tokens": draft,
            "cuda_graph_max_bs": _graph_max_bs(a, dialect),
            "mem_fraction_static": a["mem_fraction_static"],
            "allreduce": _allreduce(a, env),
            "disable_cuda_graph": bool(a["disable_cuda_graph"])
            or a.get("cuda_graph_backend_decode") == "disabled",
            "tp_size": a["tp_size"],
            # as given: the model applies SGLang's speculative default itself
            "max_running_requests": launch.args["max_running_requests"],
            "chunked_prefill_size": a["chunked_prefill_size"],
            "attention_backend": a["attention_backend"],
            "page_size": a["page_size"],
        },
        source="command line",
    )
    return Resolution(config=config, warnings=tuple(warnings), server_args=a)


def _eagle_rules(
    a: dict[str, Any], algorithm: str, architecture: str, warnings: list[str], dialect: str
) -> tuple[int, int, int]:
    steps, topk, draft = (a[k] for k in SPECULATIVE_NUMBERS)
    if steps is None:
        if topk is not None or draft is not None:
            raise _rule(dialect, "assert_all_or_none", "AssertionError")
        if algorithm != "STANDALONE" and architecture in _WIDE_TREE_ARCHITECTURES:
            steps, topk, draft = 5, 4, 8
        else:
            steps, topk, draft = 3, 1, 4
    if a["attention_backend"] == "trtllm_mha" and topk is not None and topk > 1:
        raise _rule(dialect, "trtllm_topk", "ValueError: trtllm_mha backend only supports "
                    "topk = 1 for speculative decoding.")  # fmt: skip
    if topk == 1 and draft != steps + 1:
        warnings.append(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
            "speculative_eagle_topk == 1"
        )
        draft = steps + 1
    if topk is None:
        raise _rule(dialect, "topk_compare", "TypeError: '>' not supported between "
                    "instances of 'NoneType' and 'int'")  # fmt: skip
    page_size = a["page_size"] or 1
    backend = a["attention_backend"]
    if topk > 1 and page_size > 1 and backend not in _PAGE_TREE_BACKENDS:
        raise _rule(dialect, "page_tree", "ValueError: speculative_eagle_topk > 1 with "
                    f"page_size > 1 is only supported on {_PAGE_TREE_BACKENDS}; got "
                    f"attention_backend={backend!r}. Use page_size == 1 or one of those "
                    "backends.")  # fmt: skip
    if draft is None:
        raise _rule(dialect, "draft_none", "TypeError: unsupported operand type(s) for -: "
                    "'NoneType' and 'int'")  # fmt: skip
    return steps, topk, draft


def _validate_with_speculation(a: Mapping[str, Any], algorithm: str, dialect: str) -> None:
    backend = a["attention_backend"]
    if backend == "flex_attention":
        raise _rule(dialect, "flex", "AssertionError: Speculative decoding is currently not "
                    "supported with Flex Attention backend")  # fmt: skip
    if backend in _NO_SPEC_ATTENTION:
        raise _rule(dialect, "attention", f"ValueError: Speculative decoding is not supported "
                    f"with the {backend} attention backend. Use one of flashinfer, fa3, triton, "
                    "flashmla, cutlass_mla, trtllm_mha (topk 1), aiter.")  # fmt: skip
    if a["pp_size"] > 1:
        if algorithm in ("EAGLE", "NEXTN"):
            message = (
                "AssertionError: PP + speculative decoding (MTP) is only supported on "
                "prefill nodes (disaggregation-mode=prefill)"
            )
        else:
            message = (
                "AssertionError: Pipeline parallelism currently only supports EAGLE "
                "(non-multi-layer) speculative decoding"
            )
        raise _rule(dialect, "pipeline", message)


def _graph_max_bs(a: Mapping[str, Any], dialect: str) -> int | None:
    key, list_key = (
        ("cuda_graph_max_bs_decode", "cuda_graph_bs_decode")
        if dialect == "0.5.23"
        else ("cuda_graph_max_bs", "cuda_graph_bs")
    )
    value = a.get(key)
    if value is None and a.get(list_key):
        value = max(a[list_key])
    return None if value is None else int(value)


def _allreduce(a: Mapping[str, Any], env: Mapping[str, str]) -> str:
    fusion = a.get("enable_flashinfer_allreduce_fusion") or a.get(
        "flashinfer_allreduce_fusion_backend"
    )
    if fusion and not a.get("enforce_disable_flashinfer_allreduce_fusion"):
        return "flashinfer_fusion"
    if a["enable_torch_symm_mem"]:
        return "torch_symm_mem"
    if a["enable_symm_mem"]:
        return "nccl_symm"
    if a["enable_mscclpp"]:
        return "mscclpp"
    if a["disable_custom_all_reduce"]:
        algo = env.get("NCCL_ALGO", "").split(",")[0].strip().lower()
        return {"tree": "nccl_tree", "ring": "nccl_ring"}.get(algo, "nccl")
    return "custom"


def _rule(dialect: str, site: str, exception_line: str) -> ArgumentRuleError:
    return ArgumentRuleError(exception_line, argument_traceback(dialect, site, exception_line))
