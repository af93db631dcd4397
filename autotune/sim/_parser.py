"""SGLang's ``launch_server`` command line per release, plus the simulator's ``--sim-*`` options.

Three flag dialects: ``0.5.23`` (per-phase CUDA-graph flags ``--cuda-graph-max-bs-decode`` /
``-prefill``; ``--cuda-graph-max-bs`` is then ambiguous, exactly as in that release), ``0.5.17``
(the same per-phase flags, with ``--cuda-graph-max-bs`` still accepted as a deprecated alias of
``--cuda-graph-max-bs-decode``, and ``--mm-feature-transport``) and ``0.5.3``
(``--cuda-graph-max-bs``, ``--enable-ep-moe``). Abbreviations stay enabled, as in SGLang, so a
prefix of a flag is accepted and a prefix of two flags is an argparse error (exit code 2).
Deprecated flags record SGLang's warning in the namespace's ``sim_deprecations`` list.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from autotune._errors import ConfigError
from autotune.sim._faults import parse_fault

DIALECTS: tuple[str, ...] = ("0.5.23", "0.5.17", "0.5.3")
DEFAULT_PROFILE = "rtxpro6000x8-kimi-k2.5"
PROG = {"0.5.23": "sglang serve", "0.5.17": "launch_server.py", "0.5.3": "launch_server.py"}

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
_ATTENTION["0.5.17"] = _ATTENTION["0.5.23"]


class _DeprecatedAlias(argparse.Action):
    """A deprecated spelling of another option: stores into its field and records SGLang's
    warning (0.5.17's ``--cuda-graph-max-bs`` for ``--cuda-graph-max-bs-decode``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.new_flag = kwargs.pop("new_flag")
        super().__init__(option_strings, dest, **kwargs)

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
        setattr(namespace, self.dest, values)


class _DeprecatedTrue(_DeprecatedAlias):
    """A deprecated boolean flag: stores True and records SGLang's warning."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, True, option_string)


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.0 < value < float("inf"):  # NaN too
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
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
    p = argparse.ArgumentParser(prog=prog or PROG[dialect])
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
    add("--stream-interval", type=int, default=1)
    add("--api-key", type=str)
    add("--attention-backend", choices=_ATTENTION[dialect])
    add("--speculative-algorithm", type=str)
    add("--speculative-draft-model-path", "--speculative-draft-model", type=str,
        dest="speculative_draft_model_path")  # fmt: skip
    add("--speculative-num-steps", type=int)
    add("--speculative-eagle-topk", type=int)
    add("--speculative-num-draft-tokens", type=int)
    add("--speculative-ngram-max-bfs-breadth", type=int)
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
    if dialect in ("0.5.23", "0.5.17"):
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
        if dialect == "0.5.17":
            add("--cuda-graph-max-bs", type=int, dest="cuda_graph_max_bs_decode",
                action=_DeprecatedAlias, new_flag="--cuda-graph-max-bs-decode")  # fmt: skip
            add("--mm-feature-transport", choices=("cpu", "cuda_ipc"))
    else:
        add("--cuda-graph-max-bs", type=int)
        add("--cuda-graph-bs", type=int, nargs="+")
        add("--disable-cuda-graph", action="store_true")
        add("--enable-flashinfer-allreduce-fusion", action="store_true")
        add("--enable-ep-moe", action="store_true")
    add_sim_options(p, DIALECTS, "0.5.23", what="SGLang release to imitate")
    return p


def add_sim_options(
    p: argparse.ArgumentParser, dialects: Sequence[str], default: str, *, what: str
) -> None:
    """The ``--sim-*`` options of either command line (``dialects``: those it may name)."""
    sim = p.add_argument_group("simulator options")
    opt = sim.add_argument
    opt("--sim-profile", default=DEFAULT_PROFILE, help="profile name or file")
    opt("--sim-dialect", choices=tuple(dialects), default=default, help=what)
    opt("--sim-time-scale", type=_non_negative, default=1.0, help="start-up duration multiplier")
    opt("--sim-noise", type=_non_negative, default=0.0, help="step-time noise (0: none)")
    opt("--sim-serve-scale", type=_positive, default=1.0, metavar="K",
        help="serve K times slower than the model (K > 1), or 1/K times faster (K < 1): every "
        "step takes K times its modelled duration, so a client's latencies divided by K "
        "(throughput multiplied by K) are the model's; above 1 the host's timing jitter weighs "
        "K times less next to them, below 1 a study runs faster on a faster clock; the "
        "server's log lines and /metrics report the model's time")  # fmt: skip
    opt(
        "--sim-seed",
        type=int,
        help="seed of the noise and of the output words (default: "
        "--random-seed, else drawn at each start, as SGLang draws its seed)",
    )
    opt("--sim-fault", type=_fault, action="append", default=[], metavar="FAULT",
        help="hang_startup, slow_start:X, crash_mid_benchmark:N, stall_stream:N, "
        "refuse_connections, garbage:N, http_500:N, drop_connection:N")  # fmt: skip
