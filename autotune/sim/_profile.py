"""Simulator profiles: hardware, model, draft heads and workloads, as data files.

A profile is a YAML file with five sections (``hardware``, ``model``, ``drafts``, ``startup``,
``workloads``); the shipped ones live in ``autotune/sim/profiles/``. Every figure in a profile is
either a measured fact (with its source in a comment) or a modelling choice (with its reasoning),
so a user can describe their own box by copying one and changing what differs.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from autotune._errors import ConfigError
from autotune._workload import WorkloadSpec

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class Protocol:
    """One all-reduce algorithm/protocol: ``alpha_us + kib * us_per_kib``.

    It applies to messages of ``min_kib`` up to ``max_kib`` KiB.
    """

    alpha_us: float
    us_per_kib: float
    max_kib: float | None = None
    min_kib: float | None = None


@dataclass(frozen=True)
class AllReduceMode:
    """How one all-reduce mode behaves on this hardware.

    ``protocols``: the fastest applicable one is used for each message (NCCL picks by size).
    ``failure``: when set, the mode does not work here; the value names the failure (see
    :mod:`autotune.sim._startup`). ``failure_with_graphs``: fails only under CUDA-graph capture.
    """

    protocols: tuple[Protocol, ...] = ()
    extra_memory_gib: float = 0.0
    failure: str | None = None
    failure_with_graphs: str | None = None
    #: The mode the engine silently uses instead on this hardware (SGLang switches custom
    #: all-reduce off on more than two PCIe-only GPUs, skips FlashInfer fusion below SM90), and
    #: why; such a mode has no protocols of its own.
    falls_back_to: str | None = None
    why: str | None = None


#: Tensor throughputs a profile may give beside bf16, by the dtype of a model's weights.
COMPUTE_DTYPES: tuple[str, ...] = ("bf16", "fp8", "fp4")


@dataclass(frozen=True)
class Hardware:
    gpu_name: str
    gpu_count: int
    memory_gib: float
    mem_bw_tbs: float
    mem_efficiency: float
    bf16_tflops: float
    compute_efficiency: float
    compute_capability: tuple[int, int]
    interconnect: str
    context_gib: float
    allreduce: Mapping[str, AllReduceMode]
    #: Dense tensor throughput at FP8 and FP4 (TFLOP/s, datasheet); None: not supported.
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    #: How gradually a forward pass turns from memory-bound to compute-bound: the pass takes
    #: ``(memory**p + compute**p) ** (1/p)``. Fitted to one H200 (measured 2026-12-01, profile
    #: ``h200-llama-3.1-8b``): the linears of Llama-3.1-8B cost 1.46x their one-token time at
    #: 128 tokens, where the sharp corner ``max(memory, compute)`` (p = infinity) gives 1.0x;
    #: p = 2 keeps every measured token count from 1 to 4,096 within 15%, for the target's
    #: linears and for an EAGLE-3 draft step alike.
    roofline_sharpness: float = 2.0

    def tflops(self, dtype: str) -> float:
        """Achieved dense tensor throughput for weights of ``dtype`` (TFLOP/s)."""
        peak = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "fp4": self.fp4_tflops}[dtype]
        return (peak or self.bf16_tflops) * self.compute_efficiency

    def effective_allreduce(self, mode: str) -> tuple[str, AllReduceMode]:
        """The mode that runs when ``mode`` is asked for, after any fallbacks, and its data."""
        seen = [mode]
        data = self.allreduce[mode]
        while data.falls_back_to is not None and data.falls_back_to not in seen:
            seen.append(data.falls_back_to)
            data = self.allreduce[data.falls_back_to]
        return seen[-1], data


@dataclass(frozen=True)
class MoE:
    routed_experts: int
    experts_per_token: int
    shared_experts: int
    expert_gib: float  # one expert of one layer, all tensor-parallel shards together
    moe_layers: int
    #: Locality of routing: consecutive tokens of one request share experts. Effective token count
    #: for distinct-expert reads is tokens ** routing_locality (1.0 = independent routing).
    routing_locality: float = 1.0
    #: Rows of the fused-MoE kernel's token block: an expert's weights are read once per block
    #: of the tokens routed to it, so past this many tokens per expert the reads grow with the
    #: tokens (None: once per expert whatever its load).
    block_tokens: int | None = None


@dataclass(frozen=True)
class Model:
    name: str
    architecture: str
    layers: int
    hidden: int
    vocab_size: int
    context_length: int
    weights_gib: float  # on all GPUs together
    dense_gib: float  # weights read by every forward pass (everything but routed experts)
    flops_per_token_g: float  # 2 x active parameters, GFLOP
    kv_bytes_per_token: int  # all layers, per GPU replica
    kv_sharded: bool  # GQA heads split over tensor parallel ranks; MLA latent cache is not
    allreduces_per_layer: int
    moe: MoE | None = None
    #: Weights every rank holds in full on top of its shard (GiB per GPU).
    replicated_gib: float = 0.0
    #: Key-value heads of grouped-query attention. With more tensor-parallel ranks than heads,
    #: each rank holds one whole head (replicated over ``tp / kv_heads`` ranks), so the KV cache
    #: per GPU stops shrinking at ``tp = kv_heads``. None: heads split evenly at any tp.
    kv_heads: int | None = None
    #: Dtype of the weights' matrix products: picks the hardware's tensor throughput.
    compute_dtype: str = "bf16"

    def kv_bytes_per_gpu(self, tp: int) -> float:
        """KV-cache bytes per token on one GPU at tensor parallelism ``tp``."""
        if not self.kv_sharded:
            return float(self.kv_bytes_per_token)
        shards = max(1, tp) if self.kv_heads is None else min(max(1, tp), self.kv_heads)
        return self.kv_bytes_per_token / shards


@dataclass(frozen=True)
class Acceptance:
    """Acceptance of a draft head: see :mod:`autotune.sim._acceptance`."""

    p1: float
    decay: float
    floor: float
    rank_share: float
    rank_ratio: float
    temperature_penalty: float


@dataclass(frozen=True)
class Learning:
    """How a drafter's acceptance grows while one server stays up (an n-gram table fills with
    the text it serves): each per-depth probability is its saturated value times
    ``cold_share + (1 - cold_share) * (1 - exp(-tokens / tokens_to_learn))``, ``tokens`` the
    tokens the server has generated since it started. A restart empties the table."""

    cold_share: float
    tokens_to_learn: float

    def share(self, tokens: int) -> float:
        """The share of the saturated acceptance after ``tokens`` generated tokens, in steps of
        1/100 (so that the draft trees built from it are shared between nearby counts)."""
        grown = 1.0 - math.exp(-max(0, tokens) / max(1.0, self.tokens_to_learn))
        share = self.cold_share + (1.0 - self.cold_share) * grown
        return round(min(1.0, max(0.0, share)), 2)


@dataclass(frozen=True)
class Draft:
    algorithm: str
    architecture: str
    weights_gib: float  # per GPU (replicated embed/lm_head copies included)
    step_gib: float  # weights read per draft forward, per GPU
    kv_bytes_per_token: int
    collectives_per_step: int
    step_overhead_ms: float
    acceptance: Acceptance
    #: Extra per draft step for each branch beyond the first (top-k selection, tree building).
    branch_overhead_ms: float = 0.0
    #: The drafts come from a table on the CPU (NGRAM), not from a model: no draft forward, no
    #: draft weights, KV or CUDA graphs; one lookup per cycle (``step_overhead_ms``, plus
    #: ``branch_overhead_ms`` per BFS branch beyond the first).
    table: bool = False
    #: How the acceptance grows while one server stays up (None: it does not).
    learning: Learning | None = None


#: NGRAM's drafter on every profile that gives none (``drafts.NGRAM`` in a profile overrides any of
#: these fields). SGLang 0.5.17's NGRAM worker looks draft tokens up in an n-gram table on the CPU
#: (a BFS over the table, ``--speculative-ngram-max-bfs-breadth`` wide, 10 by default): no draft
#: model, so no draft weights, KV cache or draft CUDA graphs, and a lookup of about 0.15 ms a cycle
#: (an assumption: a CPU trie walk and the copy of the drafts to the GPU).
#:
#: Acceptance, assumed: on ordinary text an n-gram match is rarer than an EAGLE head's guess
#: (rank-1 probability 0.30 at depth 1 against an EAGLE-3 head's ~0.75), but once a match is
#: found its continuation tends to hold (slow decay), and the other branches of the table rarely
#: hold the target's token (small rank share). The table fills with the text the server serves,
#: so acceptance climbs while one server stays up and falls back at a restart: a real SGLang
#: 0.5.17 on an H100 with a tiny random model went from accept length 3.48 to 4.78 over five
#: benchmark runs on one server (2,700 to 7,299 tok/s) and fell back after a restart. Modelled as
#: a saturating rise from 70% of the saturated per-depth probability, e-folding every 100,000
#: generated tokens (about one benchmark run of a few hundred requests).
NGRAM_DRAFT = Draft(
    algorithm="NGRAM",
    architecture="ngram table (CPU)",
    weights_gib=0.0,
    step_gib=0.0,
    kv_bytes_per_token=0,
    collectives_per_step=0,
    step_overhead_ms=0.15,
    acceptance=Acceptance(
        p1=0.30, decay=0.99, floor=0.20, rank_share=0.25, rank_ratio=0.4, temperature_penalty=0.4
    ),
    branch_overhead_ms=0.005,
    table=True,
    learning=Learning(cold_share=0.7, tokens_to_learn=100_000.0),
)


@dataclass(frozen=True)
class AutoFraction:
    """SGLang's automatic ``mem_fraction_static`` (reserved memory rule), per profile."""

    base_mib: float
    per_chunk_token_mib: float
    per_tp_mib: float
    #: Reserve per request of the decode graphs' largest batch (SGLang: 2 MiB x max batch).
    per_graph_bs_mib: float
    speculative_mib: float
    floor_gib: float


@dataclass(frozen=True)
class Runtime:
    """Per-step overheads and memory needs outside the static pool."""

    step_overhead_ms: float  # scheduler + sampling per forward with CUDA graphs
    eager_overhead_ms: float  # extra per forward without CUDA graphs (kernel launches)
    spec_cycle_overhead_ms: float  # CPU work and syncs of one speculative cycle
    tree_overhead_ms_per_token: float  # tree mask / verify bookkeeping per verified token
    activation_gib: float  # workspace for prefill chunks and sampling
    graph_base_gib: float  # CUDA-graph pool, fixed part
    graph_gib_per_token: float  # CUDA-graph pool per captured token
    default_cuda_graph_max_bs: int
    default_chunked_prefill: int
    default_max_running_requests: int
    auto_fraction: AutoFraction


@dataclass(frozen=True)
class Startup:
    init_s: float
    weight_load_s: float
    draft_load_s: float
    kv_alloc_s: float
    graph_capture_base_s: float
    graph_capture_per_size_s: float
    warmup_s: float
    slow_tokenizer: bool = False


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    source: str
    hardware: Hardware
    model: Model
    drafts: Mapping[str, Draft]
    runtime: Runtime
    startup: Startup
    workloads: Mapping[str, WorkloadSpec]
    acceptance_scale: Mapping[str, float]
    default_workload_name: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def default_workload(self) -> WorkloadSpec:
        return self.workloads[self.default_workload_name]

    def workload(self, name: str | None) -> WorkloadSpec:
        if name is None:
            return self.default_workload
        if name not in self.workloads:
            raise ConfigError(
                f"profile {self.name!r} has no workload {name!r}",
                hint="workloads of this profile: " + ", ".join(self.workloads),
            )
        return self.workloads[name]

    def draft(self, algorithm: str) -> Draft | None:
        """The drafter of ``algorithm``: the profile's head, or for NGRAM (which needs no draft
        model) the profile's NGRAM entry, else :data:`NGRAM_DRAFT`."""
        found = self.drafts.get(algorithm)
        if found is None and algorithm == "NGRAM":
            return NGRAM_DRAFT
        return found

    def draft_weights_gib(self, algorithm: str) -> float | None:
        draft = self.draft(algorithm)
        return None if draft is None else draft.weights_gib


def list_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a shipped profile by name, or a user's profile file by path.

    Raises:
        ConfigError: unknown name, unreadable file, or a key that is missing, unknown or of the
            wrong type (the message names the file and the key).
    """
    text = str(name_or_path)
    path = Path(text).expanduser()
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        path = PROFILE_DIR / f"{text}.yaml"
        if not path.is_file():
            close = difflib.get_close_matches(text, list_profiles(), n=1)
            raise ConfigError(
                f"unknown simulator profile {text!r}",
                hint=(f"did you mean {close[0]!r}? " if close else "")
                + "shipped profiles: "
                + ", ".join(list_profiles())
                + "; or give the path of a profile file",
            )
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read profile file: {e.strerror}", source=path) from e
    except yaml.YAMLError as e:
        raise ConfigError(f"profile file is not valid YAML: {e}", source=path) from e
    return _Reader(path).profile(raw)


T = TypeVar("T")


class _Reader:
    """Turns the YAML mapping into frozen dataclasses, naming the key of any mistake."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, message: str, hint: str | None = None) -> ConfigError:
        return ConfigError(message, source=self.path, location=where, hint=hint)

    def build(self, cls: type[T], data: Any, where: str, **converters: Any) -> T:
        if not isinstance(data, Mapping):
            raise self.fail(where, "expected a mapping")
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(fields))
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(fields), n=1)
            raise self.fail(
                f"{where}.{unknown[0]}",
                f"unknown key {unknown[0]!r}",
                hint=(f"did you mean {close[0]!r}? " if close else "")
                + "allowed: "
                + ", ".join(fields),
            )
        values: dict[str, Any] = {}
        for name, f in fields.items():
            key = f"{where}.{name}"
            if name not in data:
                has_default = f.default is not dataclasses.MISSING
                if has_default or f.default_factory is not dataclasses.MISSING:
                    continue
                raise self.fail(key, "missing key")
            value = data[name]
            if name in converters:
                values[name] = converters[name](value, key)
            else:
                values[name] = self.scalar(value, f.type, key)
        return cls(**values)

    def scalar(self, value: Any, annotation: Any, where: str) -> Any:
        kind = str(annotation)
        if kind.startswith("float"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                if value is None and "None" in kind:
                    return None
                raise self.fail(where, f"expected a number, got {value!r}")
            return float(value)
        if kind.startswith("int"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(where, f"expected an integer, got {value!r}")
            return value
        if kind.startswith("bool"):
            if not isinstance(value, bool):
                raise self.fail(where, f"expected true or false, got {value!r}")
            return value
        if kind.startswith("str"):
            if value is None and "None" in kind:
                return None
            if not isinstance(value, str):
                raise self.fail(where, f"expected a string, got {value!r}")
            return value
        return value

    def profile(self, raw: Any) -> Profile:
        if not isinstance(raw, Mapping):
            raise self.fail("", "a profile must be a mapping")
        workloads_raw = raw.get("workloads")
        if not isinstance(workloads_raw, Mapping) or not workloads_raw:
            raise self.fail("workloads", "expected a non-empty mapping of named workloads")
        workloads: dict[str, WorkloadSpec] = {}
        scales: dict[str, float] = {}
        for wname, wdata in workloads_raw.items():
            if not isinstance(wdata, Mapping):
                raise self.fail(f"workloads.{wname}", "expected a mapping")
            wdata = dict(wdata)
            scale = wdata.pop("acceptance_scale", 1.0)
            scales[str(wname)] = float(self.scalar(scale, "float", f"workloads.{wname}"))
            wdata.setdefault("name", str(wname))
            workloads[str(wname)] = WorkloadSpec.from_mapping(
                wdata, source=self.path, location=f"workloads.{wname}"
            )
        default = raw.get("default_workload", next(iter(workloads)))
        if default not in workloads:
            raise self.fail("default_workload", f"no workload named {default!r}")
        drafts_raw = raw.get("drafts", {})
        if not isinstance(drafts_raw, Mapping):
            raise self.fail("drafts", "expected a mapping of algorithm -> draft head")
        drafts = {str(alg): self.draft(str(alg), d) for alg, d in drafts_raw.items()}
        hardware = self.build(
            Hardware,
            raw.get("hardware"),
            "hardware",
            compute_capability=self.capability,
            allreduce=self.allreduce,
        )
        model = self.build(
            Model,
            raw.get("model"),
            "model",
            moe=lambda v, w: None if v is None else self.build(MoE, v, w),
            compute_dtype=lambda v, w: self.dtype(v, w, hardware),
        )
        runtime = self.build(
            Runtime,
            raw.get("runtime"),
            "runtime",
            auto_fraction=lambda v, w: self.build(AutoFraction, v, w),
        )
        startup = self.build(Startup, raw.get("startup"), "startup")
        name = raw.get("name", self.path.stem)
        notes = raw.get("notes", [])
        return Profile(
            name=str(name),
            description=str(raw.get("description", "")),
            source=str(self.path),
            hardware=hardware,
            model=model,
            drafts=drafts,
            runtime=runtime,
            startup=startup,
            workloads=workloads,
            acceptance_scale=scales,
            default_workload_name=str(default),
            notes=tuple(str(n) for n in notes),
        )

    def draft(self, alg: str, data: Any) -> Draft:
        """One drafter; an NGRAM entry overrides only the fields it gives of :data:`NGRAM_DRAFT`."""
        where = f"drafts.{alg}"
        if not isinstance(data, Mapping):
            raise self.fail(where, "expected a mapping")
        data = {"algorithm": alg, **data}
        if alg == "NGRAM":
            base = {f.name: getattr(NGRAM_DRAFT, f.name) for f in dataclasses.fields(Draft)}
            data = {**base, **data}
        acc_base = dataclasses.asdict(NGRAM_DRAFT.acceptance) if alg == "NGRAM" else {}
        learn_base = dataclasses.asdict(NGRAM_DRAFT.learning or Learning(1.0, 1.0))

        def acceptance(v: Any, w: str) -> Acceptance:
            if isinstance(v, Acceptance):
                return v
            merged = {**acc_base, **v} if isinstance(v, Mapping) else v
            return self.build(Acceptance, merged, w)

        def learning(v: Any, w: str) -> Learning | None:
            if v is None or isinstance(v, Learning):
                return v
            merged = {**learn_base, **v} if isinstance(v, Mapping) else v
            found = self.build(Learning, merged, w)
            if not (0.0 < found.cold_share <= 1.0) or found.tokens_to_learn <= 0:
                raise self.fail(w, "cold_share must be in (0, 1] and tokens_to_learn above 0")
            return found

        return self.build(Draft, data, where, acceptance=acceptance, learning=learning)

    def dtype(self, value: Any, where: str, hardware: Hardware) -> str:
        if value not in COMPUTE_DTYPES:
            raise self.fail(
                where,
                f"unknown compute dtype {value!r}",
                hint="one of " + ", ".join(COMPUTE_DTYPES),
            )
        if value != "bf16" and getattr(hardware, f"{value}_tflops") is None:
            raise self.fail(
                where,
                f"the hardware gives no {value} throughput",
                hint=f"set hardware.{value}_tflops (datasheet, dense) or use bf16",
            )
        return str(value)

    def capability(self, value: Any, where: str) -> tuple[int, int]:
        if (
            not isinstance(value, (list, tuple))
            or len(value) != 2
            or not all(isinstance(v, int) for v in value)
        ):
            raise self.fail(where, f"expected [major, minor], got {value!r}")
        return (int(value[0]), int(value[1]))

    def allreduce(self, value: Any, where: str) -> dict[str, AllReduceMode]:
        from autotune._knobs import ALLREDUCE_MODES

        if not isinstance(value, Mapping):
            raise self.fail(where, "expected a mapping of all-reduce modes")
        modes: dict[str, AllReduceMode] = {}
        for mode, data in value.items():
            if mode not in ALLREDUCE_MODES:
                raise self.fail(
                    f"{where}.{mode}",
                    f"unknown all-reduce mode {mode!r}",
                    hint="modes: " + ", ".join(ALLREDUCE_MODES),
                )
            modes[mode] = self.build(
                AllReduceMode,
                data,
                f"{where}.{mode}",
                protocols=lambda v, w: tuple(
                    self.build(Protocol, p, f"{w}[{i}]") for i, p in enumerate(v or [])
                ),
            )
        missing = [m for m in ALLREDUCE_MODES if m not in modes]
        if missing:
            raise self.fail(
                where,
                "missing all-reduce mode"
                + ("s " if len(missing) > 1 else " ")
                + ", ".join(repr(m) for m in missing),
                hint="give every mode its protocols, or say what the engine uses instead, "
                f"e.g. {missing[0]}: {{falls_back_to: nccl, why: ...}}",
            )
        for mode, data in modes.items():
            self.check_mode(mode, data, modes, f"{where}.{mode}")
        return modes

    def check_mode(
        self, mode: str, data: AllReduceMode, modes: Mapping[str, AllReduceMode], where: str
    ) -> None:
        target = data.falls_back_to
        if target is None:
            if not data.protocols:
                raise self.fail(
                    where,
                    "an all-reduce mode needs protocols (its cost) or falls_back_to",
                    hint="e.g. protocols: [{alpha_us: 20.0, us_per_kib: 0.05}]",
                )
            if data.why is not None:
                raise self.fail(f"{where}.why", "why is the reason of a falls_back_to")
            return
        if target not in modes or target == mode:
            raise self.fail(
                f"{where}.falls_back_to",
                f"{mode!r} cannot fall back to {target!r}",
                hint="name another mode of this profile: "
                + ", ".join(m for m in modes if m != mode),
            )
        if modes[target].falls_back_to is not None:
            raise self.fail(
                f"{where}.falls_back_to",
                f"{target!r} falls back itself; name the mode that runs",
                hint=f"falls_back_to: {modes[target].falls_back_to}",
            )
        if data.protocols:
            raise self.fail(
                f"{where}.protocols", "a mode that falls back costs what its fallback costs"
            )
        if data.failure or data.failure_with_graphs or data.extra_memory_gib:
            raise self.fail(
                f"{where}.falls_back_to",
                "a mode that falls back neither fails nor takes memory of its own",
                hint="keep falls_back_to and why, or drop them",
            )
        if not data.why:
            raise self.fail(f"{where}.why", "say why the engine falls back (a source or reason)")
