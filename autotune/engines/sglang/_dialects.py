"""SGLang's flag dialects: which spelling of each flag autotune emits exists in which release.

A :class:`FlagSet` is what an adapter knows about one SGLang release's ``launch_server`` options:
for each option string its destination field, whether it takes a value, its choices and whether
its help marks it deprecated. It is either detected from the SGLang the user will launch (see
:mod:`autotune.engines.sglang._detect`, every option of that release) or taken from the known table
below (only the options autotune emits), when ``engine.sglang_version`` names the release.

The table was read from the releases' own parsers (``ServerArgs.add_cli_args``); the contract
tests check it against the installed 0.5.23 and 0.5.3 parsers flag by flag. The boundaries:

* ``0.5.23`` dialect, releases 0.5.14 and newer: per-phase CUDA-graph flags
  (``--cuda-graph-max-bs-decode``, ``--cuda-graph-backend-decode``), FlashInfer all-reduce fusion
  by ``--flashinfer-allreduce-fusion-backend`` and ``--enforce-disable-flashinfer-allreduce-fusion``
  against its automatic enabling. From 0.5.20 the old ``--cuda-graph-max-bs`` is gone and, as a
  prefix of two flags, an argparse error. Adaptive speculation (``--speculative-adaptive``,
  ``--speculative-adaptive-config``, SGLang PR #21599) is read from 0.5.23's parser; a detected
  release says for itself whether it has it.
* ``0.5.3`` dialect, releases 0.5.3 to 0.5.13: ``--cuda-graph-max-bs``, ``--disable-cuda-graph``,
  ``--enable-flashinfer-allreduce-fusion``; ``--tp-size`` stores into ``tensor_parallel_size``.
* ``older``, releases before 0.5.3: as 0.5.3, without the symmetric-memory all-reduce flags.

Three facts go by release number rather than by dialect: ``sglang serve`` exists from 0.5.5 (a
detected release names its console script; the table launches ``-m sglang.launch_server``, which
every release runs); ``SGLANG_ENABLE_SPEC_V2`` chooses the speculative worker in 0.5.5 to 0.5.13
(read from the releases' ``environ.py``; later releases always run the v2 worker); and the draft
model's weights count toward ``--mem-fraction-static`` from 0.5.14
(:attr:`FlagSet.counts_draft_in_static`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from autotune._errors import ConfigError

#: The dialects of the known table, newest first.
DIALECTS: tuple[str, ...] = ("0.5.23", "0.5.3", "older")
#: The first release of each dialect (``older`` covers everything before 0.5.3).
_DIALECT_SINCE: tuple[tuple[tuple[int, int, int], str], ...] = (
    ((0, 5, 14), "0.5.23"),
    ((0, 5, 3), "0.5.3"),
)
#: The first release whose ``--mem-fraction-static`` holds the draft model's weights.
DRAFT_IN_STATIC_SINCE = (0, 5, 14)
#: The releases whose multimodal feature transport, unset, resolves to ``cuda_ipc`` on one node
#: and reserves ``SGLANG_MM_FEATURE_CACHE_MB`` (1,024 MiB) on the GPU, out of the KV pool, even
#: for a text-only model: 0.5.17, seen on a real H100 (0.5.16 chose ``cpu``; later releases
#: choose ``cpu`` again by their documentation: taken from 0.5.18 on, unconfirmed).
MM_POOL_RELEASES = ((0, 5, 17), (0, 5, 18))
#: The pool's size when ``SGLANG_MM_FEATURE_CACHE_MB`` is not set (MiB).
MM_POOL_MIB = 1024
#: The switch between SGLang's two speculative workers, and the releases that declare it
#: (``sglang/srt/environ.py``): from 0.5.14 speculative decoding always runs the v2 worker.
SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
_ENV_RELEASES: Mapping[str, tuple[tuple[int, int, int], tuple[int, int, int]]] = MappingProxyType(
    {SPEC_V2_ENV: ((0, 5, 5), (0, 5, 14))}
)
_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class OptionInfo:
    """One option string of SGLang's parser.

    ``flag``: a switch that takes no value (``store_true``). ``choices``: the accepted values, or
    None when the parser does not restrict them. ``deprecated``: the help text says so.
    """

    dest: str
    flag: bool = False
    choices: tuple[str, ...] | None = None
    nargs: int | str | None = None
    type_name: str | None = None
    deprecated: bool = False


@dataclass(frozen=True)
class FlagSet:
    """What autotune knows of one SGLang release's command line.

    ``source`` says where the knowledge comes from (the interpreter it was detected from, or the
    known table), for messages.
    """

    version: str | None
    options: Mapping[str, OptionInfo] = field(default_factory=dict)
    source: str = "known table"
    #: The ``sglang`` console script of the installation (``sglang serve``), when the release
    #: has that entrypoint and the script was found beside the interpreter or the package; the
    #: known table never names one (``python -m sglang.launch_server`` runs in every release).
    serve_script: str | None = None
    #: The environment variables autotune sets that the release declares
    #: (``SGLANG_ENABLE_SPEC_V2``).
    env_vars: frozenset[str] = frozenset()

    def has(self, flag: str) -> bool:
        """Whether ``flag`` (an option string such as ``--tp-size``) exists in this release."""
        return flag in self.options

    def dest(self, flag: str) -> str | None:
        """The parser field ``flag`` stores into, or None when the release lacks it."""
        info = self.options.get(flag)
        return None if info is None else info.dest

    def option(self, flag: str) -> OptionInfo | None:
        return self.options.get(flag)

    def accepts(self, flag: str, value: str) -> bool:
        """Whether the release has ``flag`` and its choices (if restricted) hold ``value``."""
        info = self.options.get(flag)
        if info is None:
            return False
        return info.choices is None or value in info.choices

    @property
    def release(self) -> str:
        """The release for messages: ``SGLang 0.5.23`` or ``this SGLang``."""
        return f"SGLang {self.version}" if self.version else "this SGLang"

    def preferred(self, *spellings: str) -> str | None:
        """The spelling of one setting this release prefers: the first of ``spellings`` it has
        that its help does not mark deprecated, else the first it has at all (None: none)."""
        present = [s for s in spellings if s in self.options]
        current = [s for s in present if not self.options[s].deprecated]
        chosen = current or present
        return chosen[0] if chosen else None

    @property
    def reserves_mm_pool(self) -> bool:
        """Whether an unset ``--mm-feature-transport`` reserves the multimodal feature pool on
        the GPU (:data:`MM_POOL_RELEASES`); a release of unknown number: no."""
        if self.version is None:
            return False
        try:
            number = parse_version(self.version)
        except ConfigError:
            return False
        first, gone = MM_POOL_RELEASES
        return first <= number < gone

    @property
    def counts_draft_in_static(self) -> bool:
        """Whether the draft model's weights are part of ``--mem-fraction-static``.

        From 0.5.14 (SGLang PRs #28683 and #28855) the KV pool is profiled after every weight is
        loaded, so the draft's weights come out of the static pool; before, the pool was sized
        before the draft was loaded and the draft's weights took memory outside it. A release of
        unknown number is taken to be a current one.
        """
        if self.version is None:
            return True
        try:
            number = parse_version(self.version)
        except ConfigError:
            return True
        return number >= DRAFT_IN_STATIC_SINCE


def _opt(dest: str, *, flag: bool = False, deprecated: bool = False) -> OptionInfo:
    return OptionInfo(dest=dest, flag=flag, deprecated=deprecated)


#: Options every dialect has, with the same meaning.
_COMMON: Mapping[str, OptionInfo] = MappingProxyType(
    {
        "--model-path": _opt("model_path"),
        "--host": _opt("host"),
        "--port": _opt("port"),
        "--speculative-algorithm": _opt("speculative_algorithm"),
        "--speculative-draft-model-path": _opt("speculative_draft_model_path"),
        "--speculative-num-steps": _opt("speculative_num_steps"),
        "--speculative-eagle-topk": _opt("speculative_eagle_topk"),
        "--speculative-num-draft-tokens": _opt("speculative_num_draft_tokens"),
        "--speculative-ngram-max-bfs-breadth": _opt("speculative_ngram_max_bfs_breadth"),
        "--mem-fraction-static": _opt("mem_fraction_static"),
        "--max-running-requests": _opt("max_running_requests"),
        "--chunked-prefill-size": _opt("chunked_prefill_size"),
        "--attention-backend": _opt("attention_backend"),
        "--page-size": _opt("page_size"),
        "--disable-custom-all-reduce": _opt("disable_custom_all_reduce", flag=True),
        "--enable-mscclpp": _opt("enable_mscclpp", flag=True),
        "--enable-metrics": _opt("enable_metrics", flag=True),
    }
)

_TABLES: Mapping[str, Mapping[str, OptionInfo]] = MappingProxyType(
    {
        "0.5.23": MappingProxyType(
            {
                **_COMMON,
                "--tp-size": _opt("tp_size"),
                "--cuda-graph-max-bs-decode": _opt("cuda_graph_max_bs_decode"),
                "--cuda-graph-backend-decode": OptionInfo(
                    "cuda_graph_backend_decode", choices=("full", "breakable", "disabled")
                ),
                "--cuda-graph-backend-prefill": OptionInfo(
                    "cuda_graph_backend_prefill", choices=("full", "breakable", "disabled")
                ),
                "--disable-cuda-graph": _opt("disable_cuda_graph", flag=True, deprecated=True),
                "--flashinfer-allreduce-fusion-backend": OptionInfo(
                    "flashinfer_allreduce_fusion_backend",
                    choices=("auto", "trtllm", "mnnvl", "cutedsl"),
                ),
                "--enable-flashinfer-allreduce-fusion": _opt(
                    "enable_flashinfer_allreduce_fusion", flag=True, deprecated=True
                ),
                "--enforce-disable-flashinfer-allreduce-fusion": _opt(
                    "enforce_disable_flashinfer_allreduce_fusion", flag=True
                ),
                "--enable-torch-symm-mem": _opt("enable_torch_symm_mem", flag=True),
                "--enable-symm-mem": _opt("enable_symm_mem", flag=True),
                "--speculative-adaptive": _opt("speculative_adaptive", flag=True),
                "--speculative-adaptive-config": _opt("speculative_adaptive_config"),
            }
        ),
        "0.5.3": MappingProxyType(
            {
                **_COMMON,
                "--tp-size": _opt("tensor_parallel_size"),
                "--cuda-graph-max-bs": _opt("cuda_graph_max_bs"),
                "--disable-cuda-graph": _opt("disable_cuda_graph", flag=True),
                "--enable-flashinfer-allreduce-fusion": _opt(
                    "enable_flashinfer_allreduce_fusion", flag=True
                ),
                "--enable-torch-symm-mem": _opt("enable_torch_symm_mem", flag=True),
                "--enable-symm-mem": _opt("enable_symm_mem", flag=True),
            }
        ),
        "older": MappingProxyType(
            {
                **_COMMON,
                "--tp-size": _opt("tensor_parallel_size"),
                "--cuda-graph-max-bs": _opt("cuda_graph_max_bs"),
                "--disable-cuda-graph": _opt("disable_cuda_graph", flag=True),
                "--enable-flashinfer-allreduce-fusion": _opt(
                    "enable_flashinfer_allreduce_fusion", flag=True
                ),
            }
        ),
    }
)

#: Options the contract tests must find *absent* from a release's parser (negative facts).
ABSENT: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "0.5.23": ("--cuda-graph-max-bs", "--enable-ep-moe", "--cuda-graph-bs"),
        "0.5.3": (
            "--cuda-graph-max-bs-decode",
            "--cuda-graph-backend-decode",
            "--flashinfer-allreduce-fusion-backend",
            "--enforce-disable-flashinfer-allreduce-fusion",
            "--speculative-adaptive",
        ),
    }
)


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.5.3.post1"`` -> ``(0, 5, 3)``.

    Raises:
        ConfigError: the text does not start with a release number.
    """
    match = _VERSION.match(version)
    if match is None:
        raise ConfigError(
            f"SGLang version {version!r} is not a release number",
            source="engine.sglang_version",
            hint="write it as pip shows it, e.g. 0.5.23 or 0.5.3.post1",
        )
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def dialect_for(version: str) -> str:
    """The dialect of the known table that describes ``version`` (see the module docstring)."""
    number = parse_version(version)
    for since, name in _DIALECT_SINCE:
        if number >= since:
            return name
    return "older"


def known_options(dialect: str) -> Mapping[str, OptionInfo]:
    """The known table of one dialect (``0.5.23``, ``0.5.3`` or ``older``)."""
    try:
        return _TABLES[dialect]
    except KeyError:
        raise ConfigError(
            f"unknown SGLang flag dialect {dialect!r}",
            hint="known dialects: " + ", ".join(DIALECTS),
        ) from None


def known_flagset(version: str) -> FlagSet:
    """The known table's flags for SGLang ``version`` (any release number)."""
    dialect = version if version in _TABLES else dialect_for(version)
    source = f"known table, {dialect} dialect"
    number = parse_version(version)
    env = frozenset(n for n, (first, gone) in _ENV_RELEASES.items() if first <= number < gone)
    return FlagSet(version=version, options=known_options(dialect), source=source, env_vars=env)


def env_names() -> tuple[str, ...]:
    """The environment variables whose declaration detection reads from a release."""
    return tuple(_ENV_RELEASES)


def emitted_flags() -> Iterable[str]:
    """Every option string some dialect of the table lists."""
    seen: dict[str, None] = {}
    for table in _TABLES.values():
        seen.update(dict.fromkeys(table))
    return tuple(seen)
