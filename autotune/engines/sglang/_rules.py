"""What SGLang refuses, rewrites, chooses by itself or crashes on, known before a server starts.

Argument rules (:func:`check_rules`): a configuration SGLang would refuse is ``bad_args``; one it
would silently run as something else (a rewritten or ignored value) is ``infeasible``: it is
refused too, so that a trial never runs a configuration other than the one recorded. Reasons read
``<rule>: <detail>``; the part before the first colon is the same for every configuration a rule
refuses. The draft tree's bounds (:func:`draft_token_bounds`) are the one statement of how steps,
top-k and draft tokens go together; the rules, the sampler's repair and its model of the draft
count all read them. NGRAM has no draft tree (its top-k is its n-gram BFS breadth); adaptive
speculation and the v2 worker run EAGLE-family chains of top-k 1 only.

Incompatibilities (:func:`incompatibility`): what SGLang accepts but crashes on, on some GPUs:
FlashInfer all-reduce fusion only on SM90/SM100, torch symmetric memory only on SM90 (4, 6, 8
ranks) and SM100 (6, 8 ranks), NCCL's Tree algorithm not under CUDA-graph capture.

Both adapters that speak SGLang's command line (the real server's and the simulated one's) take
all of it from :class:`SGLangRules`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from autotune._knobs import SPECULATIVE_NUMBERS, Infeasible, ServerConfig
from autotune.engines._base import Engine
from autotune.engines.sglang._adaptive import (
    ADAPTIVE_ALGORITHMS,
    ADAPTIVE_CONFIG_FLAG,
    adaptive_refusal,
    adaptive_schedule,
)
from autotune.engines.sglang._crashes import SGLANG_CRASH_RULES
from autotune.engines.sglang._dialects import MM_POOL_MIB, FlagSet
from autotune.engines.sglang._memory import memory_refusal, read_memory
from autotune.engines.sglang._section import owned_flag
from autotune.engines.sglang._serving import READINESS, SGLANG_API

if TYPE_CHECKING:
    from autotune._workload import WorkloadSpec
    from autotune.crashes import CrashRules
    from autotune.engines._base import Hardware, LoadSchedule
    from autotune.engines._memory import MemoryReading
    from autotune.engines._serving import ServerApi
    from autotune.server import Readiness

#: SGLang's running-request cap under speculative decoding when ``--max-running-requests`` is unset.
SPEC_MAX_RUNNING_REQUESTS = 48
#: Algorithms that load a separate draft model (``--speculative-draft-model-path``).
DRAFT_MODEL_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")
#: Algorithms that take a draft model when one is named and need none: NEXTN, SGLang's alias of
#: EAGLE for multi-token-prediction targets, drafts with the target's own MTP layers without one.
OPTIONAL_DRAFT_ALGORITHMS = ("NEXTN",)
#: NGRAM's top-k: SGLang sets ``speculative_eagle_topk`` to this breadth (10 unless given),
#: whatever ``--speculative-eagle-topk`` says; the knob is spelled with it under NGRAM.
NGRAM_BREADTH_FLAG = "--speculative-ngram-max-bfs-breadth"
NGRAM_DEFAULT_TOPK = 10

#: The optional switches of speculative decoding (``None``: SGLang's default).
_SWITCHES = ("speculative_adaptive", "spec_v2")
#: The candidate steps of SGLang's default adaptive configuration (every batch-size slot of
#: ``DEFAULT_ADAPTIVE_CONFIG`` in ``sglang/srt/speculative/adaptive_spec_params.py``, 0.5.23).
ADAPTIVE_STEPS = (0, 1, 3, 5, 7)
#: The algorithms the v2 worker runs (``SGLANG_ENABLE_SPEC_V2``; NEXTN is EAGLE's alias).
SPEC_V2_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")

#: Attention backends without speculative decoding (docs/advanced_features/attention_backend.md).
NO_SPEC_BACKENDS = ("fa4", "trtllm_mla", "torch_native", "flex_attention")
#: Attention backends that run top-k > 1 with a page size > 1.
PAGED_TOPK_BACKENDS = ("flashinfer", "fa3", "triton")
#: The fewest draft tokens a speculative step verifies.
MIN_DRAFT_TOKENS = 2
#: SGLang's own (steps, top-k, draft tokens) when none are given: for Llama and Grok targets ...
_AUTO_LARGE_TREE = (5, 4, 8)
#: ... and for every other target.
_AUTO_CHAIN = (3, 1, 4)
#: Ranks torch symmetric-memory all-reduce supports, by compute-capability major.
_SYMM_MEM_RANKS: Mapping[int, tuple[int, ...]] = MappingProxyType({9: (4, 6, 8), 10: (6, 8)})
#: Compute-capability majors FlashInfer's all-reduce fusion supports.
_FUSION_MAJORS = (9, 10)


def draft_token_bounds(steps: int, topk: int) -> tuple[int, int]:
    """The fewest and most draft tokens SGLang runs as given for ``steps`` and ``topk``.

    Top-k 1 fixes the draft tokens at steps + 1 (SGLang rewrites any other count); otherwise the
    tree holds at most steps x top-k + 1, and a step verifies at least two.
    """
    if topk == 1:
        return steps + 1, steps + 1
    return MIN_DRAFT_TOKENS, steps * topk + 1


def check_rules(config: ServerConfig, *, own_adaptive_config: bool = False) -> Infeasible | None:
    """Why SGLang would refuse or rewrite ``config``; ``None`` when it runs as given.

    ``own_adaptive_config``: the launch names its own ``--speculative-adaptive-config`` (in
    ``engine.extra_args``), whose candidate steps are not known here.
    """
    numbers = {k: getattr(config, k) for k in SPECULATIVE_NUMBERS}
    given = [k for k, v in numbers.items() if v is not None]
    if not config.speculative:
        if given:
            return Infeasible(
                "speculative numbers without a speculative algorithm: SGLang ignores "
                f"{given[0]}={numbers[given[0]]} when speculative_algorithm is none",
                "infeasible",
                given[0],
            )
        switch = next((k for k in _SWITCHES if getattr(config, k) is not None), None)
        if switch is not None:
            return Infeasible(
                f"{switch} without a speculative algorithm: SGLang ignores "
                f"{switch}={getattr(config, switch)} when speculative_algorithm is none",
                "infeasible",
                switch,
            )
        return None
    switched = _check_switches(config, own_adaptive_config)
    if switched is not None:
        return switched
    backend = config.attention_backend
    if backend in NO_SPEC_BACKENDS:
        return Infeasible(
            f"attention backend without speculative decoding: {backend} does not support "
            f"{config.speculative_algorithm}",
            "bad_args",
            "attention_backend",
        )
    # NGRAM takes any of the three (SGLangRules.fills_speculative_numbers)
    partial = given and len(given) < len(SPECULATIVE_NUMBERS)
    if partial and config.speculative_algorithm != "NGRAM":
        missing = next(k for k in SPECULATIVE_NUMBERS if k not in given)
        return Infeasible(
            "speculative numbers must be set all three or none: "
            f"{', '.join(given)} set but {missing} not",
            "bad_args",
            missing,
        )
    steps = config.speculative_num_steps
    topk = config.speculative_eagle_topk
    draft = config.speculative_num_draft_tokens
    if config.speculative_algorithm == "NGRAM":
        # no draft tree: the n-gram table proposes draft tokens up to a BFS breadth (the top-k)
        return _check_ngram_backend(config, NGRAM_DEFAULT_TOPK if topk is None else topk)
    if steps is None or topk is None or draft is None:
        return None  # SGLang chooses all three itself
    return _check_tree(steps, topk, draft) or _check_backend(config, topk)


def _check_switches(config: ServerConfig, own_adaptive_config: bool) -> Infeasible | None:
    """Adaptive speculation and the v2 worker: EAGLE-family chains only."""
    algorithm = config.speculative_algorithm
    topk = config.speculative_eagle_topk
    if config.speculative_adaptive:
        if algorithm not in ADAPTIVE_ALGORITHMS:
            return Infeasible(
                "adaptive speculation runs EAGLE and EAGLE3 only: SGLang falls back to static "
                f"speculation with {algorithm}",
                "infeasible",
                "speculative_adaptive",
            )
        if topk is not None and topk != 1:
            return Infeasible(
                "adaptive speculation runs top-k 1 only: SGLang falls back to static "
                f"speculation with speculative_eagle_topk={topk}",
                "infeasible",
                "speculative_eagle_topk",
            )
        steps = config.speculative_num_steps
        if steps is not None and not own_adaptive_config and steps not in ADAPTIVE_STEPS:
            return Infeasible(
                f"adaptive speculation starts at one of its candidate steps {list(ADAPTIVE_STEPS)} "
                f"(SGLang's default --speculative-adaptive-config): speculative_num_steps={steps}",
                "bad_args",
                "speculative_num_steps",
            )
    if config.spec_v2:
        if algorithm not in SPEC_V2_ALGORITHMS:
            return Infeasible(
                f"spec v2 runs EAGLE, EAGLE3, NEXTN and STANDALONE only: SGLang ignores "
                f"spec_v2=True with {algorithm}",
                "infeasible",
                "spec_v2",
            )
        if topk is not None and topk > 1:
            return Infeasible(
                f"spec v2 runs top-k 1 only: speculative_eagle_topk={topk} (SGLang 0.5.7 to "
                "0.5.10 refuse it, 0.5.11 to 0.5.13 run the v1 worker instead)",
                "bad_args",
                "speculative_eagle_topk",
            )
    return None


def _check_ngram_backend(config: ServerConfig, topk: int) -> Infeasible | None:
    page = config.page_size
    backend = config.attention_backend
    # With the backend unset SGLang picks one for the GPU; only a named backend is judged here.
    if topk > 1 and page is not None and page > 1 and backend not in (None, "flashinfer"):
        return Infeasible(
            "NGRAM with top-k > 1 and a page size > 1 needs flashinfer attention: "
            f"speculative_eagle_topk={topk}, page_size={page}, attention_backend={backend}",
            "bad_args",
            "attention_backend",
        )
    return None


def _check_tree(steps: int, topk: int, draft: int) -> Infeasible | None:
    if draft < MIN_DRAFT_TOKENS:
        return Infeasible(
            f"speculation needs at least {MIN_DRAFT_TOKENS} draft tokens: "
            f"speculative_num_draft_tokens={draft}",
            "bad_args",
            "speculative_num_draft_tokens",
        )
    low, high = draft_token_bounds(steps, topk)
    if low == high and draft != low:
        return Infeasible(
            "top-k 1 fixes the draft tokens at steps + 1: SGLang would run "
            f"speculative_num_draft_tokens={low} instead of {draft}",
            "infeasible",
            "speculative_num_draft_tokens",
        )
    if draft > high:
        return Infeasible(
            "more draft tokens than the draft tree holds: "
            f"{steps} steps x top-k {topk} + 1 = {high} < {draft}",
            "bad_args",
            "speculative_num_draft_tokens",
        )
    return None


def _check_backend(config: ServerConfig, topk: int) -> Infeasible | None:
    backend = config.attention_backend
    if backend == "trtllm_mha" and topk > 1:
        return Infeasible(
            "trtllm_mha runs speculative decoding with top-k 1 only: "
            f"speculative_eagle_topk={topk}",
            "bad_args",
            "speculative_eagle_topk",
        )
    page = config.page_size
    # With the backend unset SGLang picks one for the GPU; only a named backend is judged here.
    if topk > 1 and page is not None and page > 1 and backend not in (None, *PAGED_TOPK_BACKENDS):
        return Infeasible(
            "top-k > 1 with a page size > 1 needs flashinfer, fa3 or triton attention: "
            f"speculative_eagle_topk={topk}, page_size={page}, attention_backend={backend}",
            "bad_args",
            "speculative_eagle_topk",
        )
    return None


def automatic_choice(architecture: str | None) -> dict[str, int]:
    """The speculative numbers SGLang picks itself for a target of ``architecture``.

    (steps, top-k, draft tokens) = (5, 4, 8) for Llama and Grok models and (3, 1, 4) otherwise
    (an unknown architecture included).
    """
    large = architecture is not None and ("Llama" in architecture or "Grok" in architecture)
    steps, topk, draft = _AUTO_LARGE_TREE if large else _AUTO_CHAIN
    return {
        "speculative_num_steps": steps,
        "speculative_eagle_topk": topk,
        "speculative_num_draft_tokens": draft,
    }


def incompatibility(config: ServerConfig, hardware: Hardware) -> Infeasible | None:
    """Why SGLang would crash with ``config`` on ``hardware`` (see the module docstring)."""
    tp = config.tp_size
    cc = hardware.compute_capability
    if tp > 1 and cc is not None:
        sm = f"SM{cc[0]}{cc[1]}"
        if config.allreduce == "flashinfer_fusion" and cc[0] not in _FUSION_MAJORS:
            return Infeasible(
                f"FlashInfer all-reduce fusion supports SM90 and SM100 only; these GPUs are {sm}",
                "unsupported_arch",
                "allreduce",
            )
        if config.allreduce == "torch_symm_mem" and tp not in _SYMM_MEM_RANKS.get(cc[0], ()):
            return Infeasible(
                f"torch symmetric memory all-reduce does not support {sm} with {tp} ranks "
                "(SM90: 4, 6, 8; SM100: 6, 8)",
                "unsupported_arch",
                "allreduce",
            )
    if tp > 1 and config.allreduce == "nccl_tree" and not config.disable_cuda_graph:
        return Infeasible(
            "NCCL_ALGO=Tree cannot be captured in CUDA graphs; it needs --disable-cuda-graph",
            "graph_capture_other",
            "allreduce",
        )
    return None


def server_defaults(memory_gib: float, tp: int) -> dict[str, int]:
    """The decode CUDA-graph batch cap and prefill chunk SGLang picks when neither is given, by
    GPU memory (GiB) and tensor parallelism (``server_args.py``): below 35 GB 16 and 2,048;
    below 60 GB 256 (512 at tp >= 4) and 4,096; above, 256 (512 at tp >= 4) and 8,192."""
    if memory_gib < 35:
        max_bs, chunk = 16, 2048
    else:
        max_bs = 256 if tp < 4 else 512
        chunk = 4096 if memory_gib < 60 else 8192
    return {"cuda_graph_max_bs": max_bs, "chunked_prefill_size": chunk}


def max_running_requests_for(config: ServerConfig, workload: WorkloadSpec | None) -> int | None:
    """The ``--max-running-requests`` to pass: the knob, else what the workload needs.

    Under speculative decoding with the knob unset SGLang caps running requests at 48; a workload
    with more concurrent requests gets the cap raised to its concurrency. ``None``: not passed.
    """
    if config.max_running_requests is not None:
        return config.max_running_requests
    if (
        config.speculative
        and workload is not None
        and workload.concurrency > SPEC_MAX_RUNNING_REQUESTS
    ):
        return workload.concurrency
    return None


class SGLangRules(Engine):
    """What every adapter of an engine that speaks SGLang's command line knows: SGLang's rules
    and draft tree, its automatic speculative choice, its incompatibilities, its running-request
    cap, the flags the tuner owns, and how its log, readiness and HTTP routes are read (the
    simulated server speaks all of them as SGLang does)."""

    family = "SGLang"
    #: The twin models SGLang's server (the real one and the simulated one alike).
    twin_models = True

    @classmethod
    def owned_flag(cls, arg: str) -> tuple[str, str] | None:
        return owned_flag(arg)

    @classmethod
    def fills_speculative_numbers(cls, algorithm: str) -> bool:
        # NGRAM: SGLang sets its top-k to the BFS breadth, its draft tokens to 12 and its steps to
        # draft tokens // top-k where unset (0.5.17's _handle_ngram)
        return algorithm == "NGRAM"

    def check_rules(self, config: ServerConfig) -> Infeasible | None:
        own = any(a.split("=", 1)[0] == ADAPTIVE_CONFIG_FLAG for a in self.spec.extra_args)
        return check_rules(config, own_adaptive_config=own)

    def draft_token_bounds(self, steps: int, topk: int) -> tuple[int, int]:
        return draft_token_bounds(steps, topk)

    def automatic_choice(self) -> Mapping[str, Any] | None:
        """SGLang's (steps, top-k, draft tokens) for the target's architecture."""
        return automatic_choice(self.architecture())

    def incompatibility(self, config: ServerConfig, hardware: Hardware) -> Infeasible | None:
        return incompatibility(config, hardware)

    def server_defaults(
        self, hardware: Hardware, tp: int, *, speculative: bool = False
    ) -> Mapping[str, int]:
        """SGLang's graph batch cap and prefill chunk for ``hardware``'s memory at ``tp`` (where
        the memory is known), and under speculation its running-request cap."""
        chosen: dict[str, int] = {}
        if hardware.memory_gib is not None:
            chosen.update(server_defaults(hardware.memory_gib, tp))
        if speculative:
            chosen["max_running_requests"] = SPEC_MAX_RUNNING_REQUESTS
        return chosen

    def multimodal_pool_gib(self) -> float:
        """GiB the server's multimodal feature pool takes from the KV pool on each start: the
        pool's size (``SGLANG_MM_FEATURE_CACHE_MB`` in ``engine.env``, else 1,024 MiB) where
        ``--mm-feature-transport cuda_ipc`` is in ``engine.extra_args``, or where the release
        reserves it by default (:attr:`FlagSet.reserves_mm_pool`, SGLang 0.5.17) and the
        extra arguments do not say ``--mm-feature-transport cpu``; else 0."""
        transport = _option_value(self.spec.extra_args, "--mm-feature-transport")
        if transport is None and self.flagset().reserves_mm_pool:
            transport = "cuda_ipc"
        if transport != "cuda_ipc":
            return 0.0
        try:
            mib = int(self.spec.env.get("SGLANG_MM_FEATURE_CACHE_MB") or MM_POOL_MIB)
        except ValueError:
            mib = MM_POOL_MIB
        return max(0, mib) / 1024

    def memory_need_gib(
        self,
        config: ServerConfig,
        *,
        weights: tuple[float | None, float | None] | None = None,
    ) -> float | None:
        """The weights' need (:meth:`Engine.memory_need_gib`) plus the multimodal feature pool
        that the release takes from the KV pool (:meth:`multimodal_pool_gib`)."""
        need = super().memory_need_gib(config, weights=weights)
        return None if need is None else need + self.multimodal_pool_gib()

    def read_memory(self, lines: Iterable[str], config: ServerConfig) -> MemoryReading | None:
        """SGLang's memory lines (:mod:`._memory`)."""
        return read_memory(lines, config)

    def memory_refusal(self, reading: MemoryReading, config: ServerConfig) -> Infeasible | None:
        """SGLang's KV-pool and CUDA-graph rule applied to ``reading`` (:mod:`._memory`)."""
        return memory_refusal(reading, config)

    def flagset(self) -> FlagSet:
        """The flags of the SGLang release this adapter speaks."""
        raise NotImplementedError

    def schedule_refusal(self, config: ServerConfig) -> str | None:
        """Why adaptive speculation cannot run ``config`` at one batch size (:mod:`._adaptive`)."""
        return adaptive_refusal(self.flagset(), config)

    def load_schedule(
        self, choices: Sequence[tuple[int, ServerConfig]], base: ServerConfig
    ) -> LoadSchedule:
        """Adaptive speculation with each batch size's steps (:mod:`._adaptive`)."""
        port = self.spec.port

        def command(config: ServerConfig) -> str:
            shown = self.reference_command(config, port=port)
            return shown or self.build_launch(config, port=port).display()

        return adaptive_schedule(self.flagset(), choices, base, command=command)

    def readiness(self) -> Readiness:
        """SGLang's ready line, then ``/health_generate`` and ``/get_model_info``."""
        return READINESS

    def crash_rules(self) -> CrashRules:
        """SGLang's crash lines, start-up steps and advice."""
        return SGLANG_CRASH_RULES

    def server_api(self) -> ServerApi:
        """SGLang's ``/flush_cache``, ``/get_server_info``, ``/metrics`` and ``meta_info``."""
        return SGLANG_API

    def workload_note(self, config: ServerConfig, workload: WorkloadSpec) -> str | None:
        cap = max_running_requests_for(config, workload)
        if cap is None or config.max_running_requests is not None:
            return None
        return (
            f"under speculative decoding SGLang runs at most {SPEC_MAX_RUNNING_REQUESTS} "
            "requests at once unless max_running_requests is set; concurrency "
            f"{workload.concurrency} needs max_running_requests={cap}"
        )


def _option_value(args: Sequence[str], flag: str) -> str | None:
    """The value ``args`` give ``flag`` (``--flag value`` or ``--flag=value``; the last wins)."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found
