"""What a user knows of a box before its first start: the GPUs, the model's config, the draft.

:class:`BoxFacts` holds what ``nvidia-smi`` (name, memory, count, compute capability,
``nvidia-smi topo`` for the interconnect), the model's ``config.json`` and checkpoint (layers,
hidden size, vocabulary, KV heads, experts, the weights' size and dtype) and the draft head's size
tell. The twin's prior is built from these alone; every performance coefficient is a guess with a
spread, fitted to the trials afterwards.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from autotune._errors import ConfigError
from autotune.sim import Profile, load_profile


@dataclass(frozen=True)
class BoxFacts:
    """The knowable facts of one box serving one model (see the module docstring)."""

    gpu_name: str
    gpu_memory_gib: float
    gpu_count: int
    interconnect: str  # "nvlink" | "pcie"
    model_params_b: float
    active_params_b: float | None
    layers: int
    kv_bytes_per_token: int
    weight_dtype: str  # "bf16" | "fp8" | "int4" | ...
    draft_params_b: float | None
    compute_capability: tuple[int, int] | None = None
    model_name: str = "model"
    architecture: str = "LlamaForCausalLM"
    hidden: int = 4096
    vocab_size: int = 128256
    context_length: int = 131072
    #: The checkpoint's size (GiB, all shards); None: parameters times the dtype's bytes.
    weights_gib: float | None = None
    kv_heads: int | None = None
    #: Whether the KV cache splits over tensor-parallel ranks (GQA heads do, MLA's latent not).
    kv_sharded: bool = True
    #: Mixture of experts (config.json): routed experts, experts per token, shared experts, MoE
    #: layers, and one expert's size in GiB (3 x hidden x expert width x the dtype's bytes).
    routed_experts: int | None = None
    experts_per_token: int | None = None
    shared_experts: int = 0
    moe_layers: int | None = None
    expert_gib: float | None = None
    #: Rows of the fused-MoE kernel's token block (the engine's kernel config; None: one read
    #: of an expert per forward whatever its load).
    moe_block_tokens: int | None = None
    draft_algorithm: str = "EAGLE3"
    draft_architecture: str = "LlamaForCausalLMEagle3"

    @property
    def moe(self) -> bool:
        return bool(self.routed_experts and self.experts_per_token and self.expert_gib)

    @classmethod
    def from_profile(cls, profile: Profile | str, algorithm: str | None = None) -> BoxFacts:
        """The facts a user of ``profile``'s box would know; nothing the simulator fitted.
        ``profile``: a simulator profile, or its name or file.

        Taken: the GPU's name, memory, count, compute capability and interconnect; the model's
        config (layers, hidden, vocabulary, context, KV bytes and heads, experts), its weights'
        size and dtype; the draft head's size (its weights per GPU times the ranks, a bound
        of its parameters). Not taken: bandwidth and compute efficiencies, overheads,
        all-reduce costs, acceptance, activation and CUDA-graph memory, start-up durations.
        """
        if isinstance(profile, str):
            profile = load_profile(profile)
        hw, model = profile.hardware, profile.model
        alg = algorithm or next(iter(profile.drafts), "EAGLE3")
        draft = profile.drafts.get(alg)
        gib = 1024**3
        dtype = {"bf16": "bf16", "fp8": "fp8", "fp4": "fp4"}.get(model.compute_dtype, "bf16")
        active = model.flops_per_token_g / 2.0
        params = model.weights_gib * gib / 2 / 1e9 if dtype == "bf16" else active
        moe = model.moe
        return cls(
            gpu_name=hw.gpu_name,
            gpu_memory_gib=hw.memory_gib,
            gpu_count=hw.gpu_count,
            interconnect=hw.interconnect,
            model_params_b=round(params, 2),
            active_params_b=round(active, 2),
            layers=model.layers,
            kv_bytes_per_token=model.kv_bytes_per_token,
            weight_dtype=dtype,
            draft_params_b=(
                None if draft is None else round(draft.weights_gib * hw.gpu_count * gib / 2e9, 3)
            ),
            compute_capability=hw.compute_capability,
            model_name=model.name,
            architecture=model.architecture,
            hidden=model.hidden,
            vocab_size=model.vocab_size,
            context_length=model.context_length,
            weights_gib=model.weights_gib,
            kv_heads=model.kv_heads,
            kv_sharded=model.kv_sharded,
            routed_experts=None if moe is None else moe.routed_experts,
            experts_per_token=None if moe is None else moe.experts_per_token,
            shared_experts=0 if moe is None else moe.shared_experts,
            moe_layers=None if moe is None else moe.moe_layers,
            expert_gib=None if moe is None else moe.expert_gib,
            moe_block_tokens=None if moe is None else moe.block_tokens,
            draft_algorithm=alg,
            draft_architecture="LlamaForCausalLMEagle3" if draft is None else draft.architecture,
        )

    @classmethod
    def from_file(cls, path: str | Path) -> BoxFacts:
        """The facts a YAML file gives, one key per field (``gpu_name``, ``gpu_count``, ...).

        Raises:
            ConfigError: an unreadable file, a missing or unknown key, a value of the wrong
                type (the message names the file and the key).
        """
        source = Path(path)
        try:
            raw = yaml.safe_load(source.read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"cannot read the facts file: {e.strerror}", source=source) from e
        except yaml.YAMLError as e:
            raise ConfigError(f"the facts file is not valid YAML: {e}", source=source) from e
        if not isinstance(raw, dict):
            raise ConfigError("a facts file is a mapping of facts", source=source)
        known = {f.name: f for f in fields(cls)}
        for key in raw:
            if key not in known:
                raise ConfigError(
                    f"unknown fact {key!r}",
                    source=source,
                    location=str(key),
                    hint="facts: " + ", ".join(known),
                )
        values: dict[str, Any] = {}
        for name, f in known.items():
            if name not in raw:
                if f.default is MISSING:
                    raise ConfigError("missing fact", source=source, location=name)
                continue
            value = raw[name]
            kind = str(f.type)
            ok = (
                (kind.startswith("str") and isinstance(value, str))
                or (
                    kind.startswith("int")
                    and isinstance(value, int)
                    and not isinstance(value, bool)
                )
                or (
                    kind.startswith("float")
                    and isinstance(value, (int, float))
                    and not isinstance(value, bool)
                )
                or (kind.startswith("bool") and isinstance(value, bool))
                or (value is None and "None" in kind)
                or (kind.startswith("tuple") and isinstance(value, list) and len(value) == 2)
            )
            if not ok:
                raise ConfigError(f"expected {kind}, got {value!r}", source=source, location=name)
            values[name] = tuple(value) if isinstance(value, list) else value
        return cls(**values)
