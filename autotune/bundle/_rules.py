"""What a bundle leaves out, and why: trim rules (files) and exclusions (packages).

A :class:`TrimRule` is a glob over paths relative to the unpacked folder and the reason that
removing what it matches is safe; :data:`DEFAULT_TRIM` holds the rules for SGLang served with
``--attention-backend triton`` (no FlashAttention-3). An :class:`Exclusion` is a package the
build never carries even when a chosen wheel requires it (the box's own copy, if any, stays);
:data:`DEFAULT_EXCLUDES` holds SGLang 0.5.17's requirements that a triton-backend server on an
H100 never imports, or whose pins the box's newer release serves. An :class:`Addition` is a
requirement a package has without declaring it (it imports the module at the top of a module the
server loads); :data:`DEFAULT_ADDITIONS` holds SGLang 0.5.17's.

Glob syntax: ``/`` separates folders, ``*`` / ``?`` / ``[...]`` match within one name, a
leading ``**/`` matches at any depth, a trailing ``/`` means a folder and all under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from packaging.utils import NormalizedName, canonicalize_name


@dataclass(frozen=True)
class TrimRule:
    """Remove what ``pattern`` matches, because ``reason``."""

    pattern: str
    reason: str

    def matches(self, path: str) -> bool:
        """Whether the stage-relative POSIX ``path`` (a file) is removed by this rule."""
        parts = path.split("/")
        pattern = self.pattern.rstrip("/").split("/")
        if self.pattern.endswith("/"):
            return any(_match(pattern, parts[:end]) for end in range(1, len(parts)))
        return _match(pattern, parts)


def _match(pattern: list[str], parts: list[str]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match(rest, parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], head) and _match(rest, parts[1:])


def trimmed_by(path: str, rules: tuple[TrimRule, ...], keep: tuple[str, ...]) -> TrimRule | None:
    """The first rule that removes ``path``, or None (also when a ``keep`` glob matches it)."""
    for rule in rules:
        if rule.matches(path):
            if any(TrimRule(k, "").matches(path) for k in keep):
                return None
            return rule
    return None


_FA3 = "loaded only by --attention-backend fa3"
_FI_DATA = "flashinfer/data"

#: The default trim rules: what SGLang served with --attention-backend triton never loads.
DEFAULT_TRIM: tuple[TrimRule, ...] = (
    TrimRule("sgl_kernel/flash_ops*.so", f"FlashAttention-3 (1.1 GB unpacked), {_FA3}"),
    TrimRule(
        "sgl_kernel/flashmla_ops*.so", "FlashMLA kernels, loaded only by the flashmla backend"
    ),
    TrimRule("sgl_kernel/infllm_ops*.so", "InfLLM sparse-attention kernels, loaded on demand only"),
    TrimRule("sgl_kernel/sm100/", "the Blackwell (sm100) build; an H100 loads sgl_kernel/sm90/"),
    TrimRule("xgrammar/lib/libxgrammar.a", "a static library for C++ builds, never imported"),
    TrimRule("sglang/test/", "SGLang's own test suite, not imported by the server"),
    TrimRule(
        "sglang/multimodal_gen/",
        "the diffusion-model server (sglang[diffusion]); a text model never imports it and "
        "`sglang serve` treats it as not installed",
    ),
    TrimRule(
        "sglang/srt/grpc/_core*.so",
        "the native gRPC server, imported only with --grpc-port (which names it if missing)",
    ),
    TrimRule(
        "sglang/srt/server/_core*.so",
        "the embedded Rust HTTP server, imported only when SGLANG_RUST_SERVER is set",
    ),
    TrimRule(f"{_FI_DATA}/cutlass/examples/", "CUTLASS examples; JIT builds include only headers"),
    TrimRule(f"{_FI_DATA}/cutlass/test/", "CUTLASS's tests; JIT builds include only headers"),
    TrimRule(
        f"{_FI_DATA}/cutlass/python/", "CUTLASS's Python generator, unused by flashinfer's JIT"
    ),
    TrimRule(f"{_FI_DATA}/cccl/**/test/", "CCCL's tests; JIT builds include only headers"),
    TrimRule(f"{_FI_DATA}/cccl/**/tests/", "CCCL's tests; JIT builds include only headers"),
    TrimRule(f"{_FI_DATA}/cccl/python/", "CCCL's Python bindings, unused by flashinfer's JIT"),
    TrimRule(f"{_FI_DATA}/cccl/docs/", "CCCL's documentation"),
    TrimRule(
        "zstandard/_cffi*.so",
        "zstandard's CFFI backend; `import zstandard` loads the C backend (backend_c)",
    ),
    TrimRule(
        "jedi/third_party/",
        "typeshed and Django stubs jedi reads only to infer completions in an interactive shell",
    ),
    TrimRule("**/__pycache__/", "bytecode caches; Python writes its own on first import"),
    TrimRule("**/*.pyc", "bytecode; Python compiles the sources on first import"),
    TrimRule("bin/", "console scripts; the bundle is used through PYTHONPATH, not a PATH"),
)


@dataclass(frozen=True)
class Exclusion:
    """Never carry ``name``, because ``reason``."""

    name: NormalizedName
    reason: str


def exclusion(name: str, reason: str) -> Exclusion:
    """An :class:`Exclusion` of ``name`` (any spelling)."""
    return Exclusion(canonicalize_name(name), reason)


_UNUSED = "not imported by a triton-backend text server (SGLang 0.5.17 on an H100)"
_BOX = "pinned older than the box's own release, which serves (kept from the box)"
_FI = "an optional flashinfer requirement the server does not use"

#: The default exclusions, for SGLang 0.5.17 with --attention-backend triton.
DEFAULT_EXCLUDES: tuple[Exclusion, ...] = (
    *(
        exclusion(name, _UNUSED)
        for name in (
            "anthropic",
            "blobfile",
            "datasets",
            "easydict",
            "flash-attn-4",
            "helion",
            "humming-kernels",
            "interegular",
            "kernels",
            "llguidance",
            "mistral-common",
            "modelscope",
            "nvidia-mathdx",
            "openai-harmony",
            "outlines",
            "py-spy",
            "quack-kernels",
            "smg-grpc-servicer",
            "tilelang",
            "tokenspeed-mla",
            "torch-memory-saver",
            "torchao",
            "torchcodec",
            "watchfiles",
        )
    ),
    exclusion("numba", _BOX),
    exclusion("timm", _BOX),
    exclusion("cuda-python", "the box's cuda-bindings (the module cuda-python installs) serves"),
    exclusion("nvidia-cutlass-dsl", _FI),
    exclusion("cuda-tile", _FI),
    exclusion("nccl4py", _FI),
    exclusion("nvidia-cudnn-frontend", _FI),
)


@dataclass(frozen=True)
class Addition:
    """When ``package`` is carried, it also requires ``requirement``, because ``reason``."""

    package: NormalizedName
    requirement: str
    reason: str


#: Modules SGLang 0.5.17 imports at the top of modules its server loads, undeclared.
DEFAULT_ADDITIONS: tuple[Addition, ...] = (
    Addition(
        canonicalize_name("sglang"),
        "dill",
        "imported by sglang/srt/sampling/custom_logit_processor.py, not declared",
    ),
    Addition(
        canonicalize_name("sglang"),
        "jsonschema",
        "imported by sglang/srt/entrypoints/openai/serving_chat.py, not declared",
    ),
)
