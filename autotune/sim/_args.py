"""The simulated server's command line: SGLang's ``launch_server`` flags per release, and its rules.

:func:`parse_launch_args` reads a command line with the parser of the release it imitates
(:mod:`autotune.sim._parser`: dialects ``0.5.23``, ``0.5.17`` and ``0.5.3``; argparse errors
exit with code 2, as SGLang's do).

After parsing, :func:`resolve_launch` applies SGLang's own argument rules for speculative decoding
(the reset of max running requests to 48, the top-k 1 rewrite of the number of draft tokens, the
assertions) and maps the flags to a canonical :class:`~autotune._knobs.ServerConfig`. The
automatic speculative numbers (all three flags unset) are the model's
(:meth:`~autotune.sim.SimModel.resolve`), passed in as ``resolve``. A rule that SGLang enforces
with an exception raises :class:`ArgumentRuleError`, whose ``lines`` are the traceback SGLang
prints.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune._errors import ConfigError
from autotune._knobs import SPECULATIVE_NUMBERS, ServerConfig
from autotune.sim._faults import FaultPlan
from autotune.sim._logging import argument_traceback
from autotune.sim._parser import DEFAULT_PROFILE as DEFAULT_PROFILE  # the package exports it
from autotune.sim._parser import DIALECTS as DIALECTS  # the package exports it
from autotune.sim._parser import PROG, build_parser

#: Attention backends that cannot run speculative decoding (SGLang's attention-backend docs).
_NO_SPEC_ATTENTION = ("fa4", "trtllm_mla", "torch_native", "flex_attention")
_MODELLED_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
_UNMODELLED_ALGORITHMS = ("DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP")
_MTP_ARCHITECTURES = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM")
_PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")


@dataclass(frozen=True)
class SimSettings:
    """The ``--sim-*`` options: which profile, which release, how fast, which faults."""

    profile: str = DEFAULT_PROFILE
    dialect: str = "0.5.23"
    time_scale: float = 1.0
    noise: float = 0.0
    #: Serving runs this many times slower than the model, or faster below 1
    #: (``--sim-serve-scale``).
    serve_scale: float = 1.0
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
    #: GiB the server reserves on the GPU outside the static arithmetic, taken from the KV pool
    #: (0.5.17's multimodal feature pool under ``cuda_ipc``: :func:`multimodal_transport`).
    reserved_gib: float = 0.0

    @property
    def num_draft_tokens(self) -> int:
        return int(self.server_args.get("speculative_num_draft_tokens") or 0)


class ArgumentRuleError(ConfigError):
    """SGLang rejected the arguments with an exception; ``lines`` are its traceback."""

    def __init__(self, message: str, lines: Sequence[str]) -> None:
        super().__init__(message)
        self.lines = tuple(lines)
        self.exit_code = 1


def parse_launch_args(argv: Sequence[str], *, prog: str | None = None) -> LaunchArgs:
    """Parse a command line; argparse errors exit with code 2 as SGLang's do."""
    pre = argparse.ArgumentParser(prog=prog or PROG["0.5.23"], add_help=False)
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
        serve_scale=values.pop("sim_serve_scale"),
        seed=values.pop("sim_seed"),
        faults=FaultPlan.parse(values.pop("sim_fault")),
    )
    deprecations = tuple(values.pop("sim_deprecations"))
    return LaunchArgs(args=values, sim=sim, deprecations=deprecations)


#: SGLang's automatic choices for a configuration (:meth:`autotune.sim.SimModel.resolve`).
Resolver = Callable[[ServerConfig], ServerConfig]


def resolve_launch(
    launch: LaunchArgs,
    *,
    architecture: str,
    env: Mapping[str, str],
    resolve: Resolver | None = None,
) -> Resolution:
    """Apply SGLang's argument rules and map the flags to a canonical configuration.

    ``resolve`` supplies the automatic speculative numbers when none of the three flags is set
    (the server passes its model's :meth:`~autotune.sim.SimModel.resolve`); without it they stay
    unset in the configuration, for the model to choose.

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
            # SGLang sets NGRAM's top-k to its BFS breadth (10 unless given), whatever
            # --speculative-eagle-topk says, and its steps to draft tokens // top-k where unset
            # (0 with 8 draft tokens: NGRAM drafts no steps, its table does)
            topk = a.get("speculative_ngram_max_bfs_breadth") or NGRAM_BREADTH
            steps = draft // topk if steps is None else steps
        else:
            steps, topk, draft = _eagle_rules(a, algorithm, resolve, warnings, dialect)
        _validate_with_speculation(a, algorithm, dialect)
    a.update(zip(SPECULATIVE_NUMBERS, (steps, topk, draft), strict=True))
    if algorithm == "NGRAM" and steps is not None:
        steps = max(1, steps)  # the configuration's steps count from 1; the table has none
    reserved_gib = multimodal_transport(a, dialect, env, warnings)
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
    return Resolution(
        config=config, warnings=tuple(warnings), server_args=a, reserved_gib=reserved_gib
    )


#: NGRAM's BFS breadth when ``--speculative-ngram-max-bfs-breadth`` is not given.
NGRAM_BREADTH = 10
#: The multimodal feature pool SGLang reserves under ``cuda_ipc``, MiB, unless
#: ``SGLANG_MM_FEATURE_CACHE_MB`` says otherwise.
MM_FEATURE_CACHE_MB = 1024


def multimodal_transport(
    a: dict[str, Any], dialect: str, env: Mapping[str, str], lines: list[str]
) -> float:
    """SGLang 0.5.17's multimodal feature transport: GiB it reserves on the GPU.

    Unset, it resolves to ``cuda_ipc`` on one node (0.5.16 chose ``cpu``; later releases
    choose ``cpu`` again) and says so; ``cuda_ipc`` reserves ``SGLANG_MM_FEATURE_CACHE_MB``
    (1,024 MiB) on the base GPU, which the KV pool then lacks (a real 0.5.17 on an H100 did
    so for a text-only model); ``--mm-feature-transport cpu`` reserves nothing. The messages
    go to ``lines``; ``a`` gets the resolved value. Other dialects: nothing.
    """
    if dialect != "0.5.17":
        return 0.0
    transport = a.get("mm_feature_transport")
    if transport is None:
        transport = a["mm_feature_transport"] = "cuda_ipc"
        lines.append("Multimodal feature transport auto-resolved to cuda_ipc (single-node "
                     "CUDA). Pass --mm-feature-transport=cpu to opt out.")  # fmt: skip
    if transport != "cuda_ipc":
        return 0.0
    try:
        mib = int(env.get("SGLANG_MM_FEATURE_CACHE_MB") or MM_FEATURE_CACHE_MB)
    except ValueError:
        mib = MM_FEATURE_CACHE_MB
    lines.append(
        f"Using CUDA IPC for multimodal features: reserving up to {mib} MiB on base GPU 0 "
        "across 1 tokenizer worker(s). This reduces KV cache headroom; a full pool falls back "
        "to CPU transport."
    )
    return max(0, mib) / 1024


def _eagle_rules(
    a: dict[str, Any],
    algorithm: str,
    resolve: Resolver | None,
    warnings: list[str],
    dialect: str,
) -> tuple[int | None, int | None, int | None]:
    steps, topk, draft = (a[k] for k in SPECULATIVE_NUMBERS)
    if steps is None:
        if topk is not None or draft is not None:
            raise _rule(dialect, "assert_all_or_none", "AssertionError")
        if resolve is None:
            return None, None, None
        auto = resolve(ServerConfig(speculative_algorithm=algorithm))
        steps = auto.speculative_num_steps
        topk = auto.speculative_eagle_topk
        draft = auto.speculative_num_draft_tokens
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
        if dialect != "0.5.3"
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
