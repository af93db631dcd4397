"""vLLM's ``vllm serve`` command line, as the simulated server reads it, and vLLM's rules.

``python -m autotune.sim serve MODEL [vLLM flags] [--sim-* options]``: the first word ``serve``
selects vLLM's command line (dialect ``vllm-0.33.0``). The flags are those of vLLM 0.33.0 that a
tuner sets (``--tensor-parallel-size``, ``--speculative-config`` as JSON,
``--gpu-memory-utilization``, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--block-size``,
``--max-cudagraph-capture-size``, ``--enforce-eager``, ``--disable-custom-all-reduce``, ...); as
in vLLM, ``_`` may stand for ``-`` in a flag's name. An argparse error exits with code 2.

:func:`resolve_vllm_launch` applies vLLM's speculative rules (the ``method``, the draft ``model``,
``num_speculative_tokens``), picks vLLM's defaults for this GPU (``max_num_seqs`` 1024 and
``max_num_batched_tokens`` 8192 on a GPU of 70 GiB or more, 256 and 2048 below) and maps the flags
to a canonical :class:`~autotune._knobs.ServerConfig`: one draft chain (top-k 1) of
``num_speculative_tokens`` tokens, ``num_speculative_tokens + 1`` verified per pass. A config that
vLLM's ``SpeculativeConfig`` refuses raises :class:`~autotune.sim._args.ArgumentRuleError` whose
lines are the traceback vLLM prints.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from autotune._errors import ConfigError
from autotune._knobs import ServerConfig
from autotune.sim._args import ArgumentRuleError, LaunchArgs, Resolution, SimSettings
from autotune.sim._faults import FaultPlan
from autotune.sim._parser import add_sim_options

#: vLLM releases whose command line the simulated server speaks.
VLLM_DIALECTS: tuple[str, ...] = ("vllm-0.33.0",)
PROG = "vllm serve"
#: ``--speculative-config`` methods and the canonical algorithm each stands for.
METHODS: Mapping[str, str] = {
    "eagle3": "EAGLE3",
    "eagle": "EAGLE",
    "mtp": "NEXTN",
    "ngram": "NGRAM",
    "draft_model": "STANDALONE",
}
_UNMODELLED_METHODS = ("medusa", "mlp_speculator", "suffix")
_SITE = "/usr/local/lib/python3.12/dist-packages"


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"invalid loads value: {text!r}")
    return value


def build_vllm_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """``vllm serve``'s parser (the flags the simulated server reads) plus ``--sim-*``."""
    p = argparse.ArgumentParser(prog=prog or PROG)
    add = p.add_argument
    add("subcommand", choices=("serve",))
    add("model_tag", nargs="?")
    add("--model", type=str)
    add("--host", type=str, default="127.0.0.1")
    add("--port", type=int, default=8000)
    add("--api-key", type=str)
    add("--served-model-name", type=str, nargs="+")
    add("--tokenizer", type=str)
    add("--trust-remote-code", action="store_true")
    add("--dtype", choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
        default="auto")  # fmt: skip
    add("--kv-cache-dtype", choices=("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"),
        default="auto")  # fmt: skip
    add("--quantization", "-q", type=str)
    add("--max-model-len", type=int)
    add("--tensor-parallel-size", "-tp", type=int, default=1)
    add("--pipeline-parallel-size", "-pp", type=int, default=1)
    add("--speculative-config", "-sc", type=_json_object)
    add("--gpu-memory-utilization", type=float, default=0.9)
    add("--max-num-seqs", type=int)
    add("--max-num-batched-tokens", type=int)
    add("--block-size", type=int, choices=(1, 8, 16, 32, 64, 128), default=16)
    add("--attention-backend", type=str)
    add("--max-cudagraph-capture-size", type=int)
    add("--cudagraph-capture-sizes", type=int, nargs="+")
    add("--enforce-eager", action="store_true")
    add("--disable-custom-all-reduce", action="store_true")
    add("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    add("--seed", type=int, default=0)
    add("--disable-log-stats", action="store_true")
    add("--enable-log-requests", action="store_true")
    add("--uvicorn-log-level", type=str, default="info")
    add_sim_options(p, VLLM_DIALECTS, VLLM_DIALECTS[0], what="vLLM release to imitate")
    return p


def _dashes(word: str) -> str:
    """vLLM's parser reads ``--max_num_seqs`` as ``--max-num-seqs``."""
    if not word.startswith("--"):
        return word
    name, eq, value = word.partition("=")
    return name.replace("_", "-") + eq + value


def parse_vllm_args(argv: Sequence[str], *, prog: str | None = None) -> LaunchArgs:
    """Parse ``serve MODEL ...``; argparse errors exit with code 2 as vLLM's do."""
    parser = build_vllm_parser(prog)
    values = vars(parser.parse_args([_dashes(w) for w in argv]))
    model = values.pop("model_tag") or values["model"]
    if model is None:
        parser.error("the model is required: vllm serve MODEL (or --model)")
    values["model"] = model
    values.pop("subcommand")
    sim = SimSettings(
        profile=values.pop("sim_profile"),
        dialect=values.pop("sim_dialect"),
        time_scale=values.pop("sim_time_scale"),
        noise=values.pop("sim_noise"),
        serve_scale=values.pop("sim_serve_scale"),
        seed=values.pop("sim_seed"),
        faults=FaultPlan.parse(values.pop("sim_fault")),
    )
    return LaunchArgs(args=values, sim=sim)


def resolve_vllm_launch(
    launch: LaunchArgs, *, memory_gib: float, env: Mapping[str, str]
) -> Resolution:
    """vLLM's speculative rules and defaults for a GPU of ``memory_gib``; the canonical config.

    Raises:
        ArgumentRuleError: vLLM's ``SpeculativeConfig`` refuses the speculative configuration.
        ConfigError: a method the simulated server does not model, or a value out of range.
    """
    a = dict(launch.args)
    big = memory_gib >= 70
    a["max_num_seqs"] = a["max_num_seqs"] or (1024 if big else 256)
    a["max_num_batched_tokens"] = a["max_num_batched_tokens"] or (8192 if big else 2048)
    util = a["gpu_memory_utilization"]
    if not 0 < util <= 1:
        raise _validation(
            "CacheConfig",
            f"gpu_memory_utilization\n  Input should be less than or equal to 1 and greater "
            f"than 0 [type=value_error, input_value={util}, input_type=float]",
        )
    algorithm, steps = "none", None
    spec = a["speculative_config"]
    if spec is not None:
        algorithm, steps = _speculative(spec)
    a["num_speculative_tokens"] = steps or 0
    capture = a["max_cudagraph_capture_size"]
    if capture is None and a["cudagraph_capture_sizes"]:
        capture = max(a["cudagraph_capture_sizes"])
    if capture is None:
        capture = min(512, 2 * a["max_num_seqs"])
    a["max_cudagraph_capture_size"] = capture
    a["speculative_num_draft_tokens"] = (steps or 0) + 1 if steps else 0
    disable_custom = a["disable_custom_all_reduce"]
    algo = env.get("NCCL_ALGO", "").split(",")[0].strip().lower()
    allreduce = (
        {"tree": "nccl_tree", "ring": "nccl_ring"}.get(algo, "nccl") if disable_custom else "custom"
    )
    config = ServerConfig.from_params(
        {
            "speculative_algorithm": algorithm,
            "speculative_num_steps": steps,
            "speculative_eagle_topk": 1 if steps else None,
            "speculative_num_draft_tokens": steps + 1 if steps else None,
            "cuda_graph_max_bs": capture,
            "gpu_memory_utilization": util,
            "allreduce": allreduce,
            "disable_cuda_graph": bool(a["enforce_eager"]),
            "tp_size": a["tensor_parallel_size"],
            "max_running_requests": a["max_num_seqs"],
            "chunked_prefill_size": a["max_num_batched_tokens"],
            "attention_backend": a["attention_backend"],
            "page_size": a["block_size"],
        },
        source="command line",
    )
    return Resolution(config=config, warnings=(), server_args=a)


def _speculative(spec: Mapping[str, Any]) -> tuple[str, int | None]:
    """The canonical algorithm and chain length of a ``--speculative-config`` object."""
    method = spec.get("method")
    model = spec.get("model")
    steps = spec.get("num_speculative_tokens")
    if method in _UNMODELLED_METHODS:
        raise ConfigError(
            f"speculative method {method!r} is not modelled by the simulated server",
            source="--speculative-config",
            hint="use one of " + ", ".join(METHODS),
        )
    if method is None and model is None:
        raise _validation(
            "SpeculativeConfig",
            "  Value error, num_speculative_tokens was provided but without speculative model. "
            "[type=value_error, input_type=ArgsKwargs]",
        )
    if method is not None and method not in METHODS:
        allowed = ", ".join(f"'{m}'" for m in (*METHODS, *_UNMODELLED_METHODS))
        raise _validation(
            "SpeculativeConfig",
            f"method\n  Input should be {allowed} [type=literal_error, "
            f"input_value={method!r}, input_type=str]",
        )
    method = method or "draft_model"
    if method in ("eagle3", "eagle", "draft_model") and model is None:
        raise _validation(
            "SpeculativeConfig",
            "  Value error, num_speculative_tokens was provided but without speculative model. "
            "[type=value_error, input_type=ArgsKwargs]",
        )
    if steps is None and method in ("eagle3", "eagle", "draft_model"):
        raise _validation(
            "SpeculativeConfig",
            "  Value error, num_speculative_tokens must be provided with speculative model "
            "unless the draft model config contains an n_predict parameter. "
            "[type=value_error, input_type=ArgsKwargs]",
        )
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise _validation(
            "SpeculativeConfig",
            f"  Value error, Expected num_speculative_tokens to be greater than zero ({steps}). "
            "[type=value_error, input_type=ArgsKwargs]",
        )
    tp = spec.get("draft_tensor_parallel_size")
    if tp is not None and tp != 1 and not isinstance(tp, int):
        raise _validation(
            "SpeculativeConfig",
            f"draft_tensor_parallel_size\n  Input should be a valid integer "
            f"[type=int_type, input_value={tp!r}]",
        )
    return METHODS[method], steps if steps is not None else 3


def _validation(config_class: str, detail: str) -> ArgumentRuleError:
    """vLLM's report of a config its pydantic validation refuses, with the API server's
    traceback (the config is built before the engine core starts)."""
    head = f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {config_class}"
    lines = (
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/vllm", line 10, in <module>',
        "    sys.exit(main())",
        f'  File "{_SITE}/vllm/entrypoints/cli/main.py", line 73, in main',
        "    args.dispatch_function(args)",
        f'  File "{_SITE}/vllm/entrypoints/cli/serve.py", line 60, in cmd',
        "    uvloop.run(run_server(args))",
        f'  File "{_SITE}/vllm/engine/arg_utils.py", line 1512, in create_engine_config',
        "    speculative_config = self.create_speculative_config(",
        f'  File "{_SITE}/vllm/config/speculative.py", line 288, in __post_init__',
        "    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)",
        head,
        *detail.split("\n"),
    )
    return ArgumentRuleError(head, lines)
