"""What autotune knows of one vLLM release's command line, detected or from its table.

vLLM's server takes every setting as a flag of ``vllm serve`` except speculative decoding, which
is one JSON flag (``--speculative-config``). Flags move between releases: the largest CUDA-graph
batch is ``--max-cudagraph-capture-size`` in current releases and the one value of
``--cuda-graph-sizes`` in older ones. :func:`detect_flags` reads the installed release's own
parser (``make_arg_parser`` of ``vllm.entrypoints.common.cli_args``, or of
``vllm.entrypoints.openai.cli_args`` in older releases) in the interpreter that will run
the server; :func:`known_flags` gives autotune's table of a named release.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from autotune._errors import EngineError
from autotune.engines._report import ReportProbe

#: Seconds allowed for importing vLLM's parser (it imports torch and transformers).
DETECT_TIMEOUT_S = 240.0
#: Prefix of the report line, so that what vLLM prints while importing is ignored.
MARKER = "AUTOTUNE-VLLM-FLAGS "
_PIN = "or set engine.vllm_version to use autotune's table of flags"


@dataclass(frozen=True)
class VLLMFlags:
    """The option strings of one vLLM release's ``vllm serve`` and the choices they restrict.

    ``source`` says where the knowledge comes from (an interpreter, or the known table).
    """

    version: str | None
    options: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    source: str = "known table"

    def has(self, flag: str) -> bool:
        return flag in self.options

    def accepts(self, flag: str, value: str) -> bool:
        """Whether the release has ``flag`` and its choices (if restricted) hold ``value``."""
        if flag not in self.options:
            return False
        choices = self.options[flag]
        return choices is None or value in choices

    @property
    def release(self) -> str:
        """The release for messages: ``vLLM 0.33.0`` or ``this vLLM``."""
        return f"vLLM {self.version}" if self.version else "this vLLM"


_COMMON = (
    "--host",
    "--port",
    "--api-key",
    "--tensor-parallel-size",
    "--speculative-config",
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--enforce-eager",
    "--disable-custom-all-reduce",
    "--block-size",
)

#: Releases since the capture size became one number (0.34.0 only added flags autotune does not
#: emit: --cache-aware-admission-*, --enable-extensible-kv-cache, --shuffle-safetensors-files, ...).
_CAPTURE_SIZE = (*_COMMON, "--max-cudagraph-capture-size", "--attention-backend")

#: Option strings of the releases autotune knows without asking them, read from their parsers.
_TABLES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "0.34.0": _CAPTURE_SIZE,
        "0.33.0": _CAPTURE_SIZE,
        "0.10.2": (*_COMMON, "--cuda-graph-sizes"),
    }
)


def known_releases() -> tuple[str, ...]:
    return tuple(_TABLES)


def known_flags(release: str) -> VLLMFlags:
    """autotune's table of ``release`` (``engine.vllm_version``).

    Raises:
        EngineError: a release autotune has no table of.
    """
    options = _TABLES.get(release)
    if options is None:
        raise EngineError(
            f"autotune has no table of vLLM {release}'s flags",
            hint="use one of " + ", ".join(_TABLES) + ", or leave engine.vllm_version out to "
            "read the flags of the installed vLLM",
        )
    return VLLMFlags(version=release, options=dict.fromkeys(options), source="known table")


#: Runs in the vLLM interpreter; kept to the standard library besides vLLM itself.
SCRIPT = r"""
import json, sys

def report():
    try:
        import vllm
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        try:  # current releases
            from vllm.entrypoints.common.cli_args import make_arg_parser
        except ImportError:  # releases before the move
            from vllm.entrypoints.openai.cli_args import make_arg_parser
    except BaseException as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}
    version = getattr(vllm, "__version__", None)
    try:
        parser = make_arg_parser(FlexibleArgumentParser())
    except BaseException as e:
        return {"error": "%s: %s" % (type(e).__name__, e), "version": version}
    options = {}
    for action in parser._actions:
        choices = None
        if action.choices is not None:
            try:
                choices = [str(c) for c in action.choices]
            except TypeError:
                choices = None
        for option in action.option_strings:
            options[option] = choices
    return {"version": None if version is None else str(version), "options": options}

sys.stdout.write("\n" + MARKER + json.dumps(report()) + "\n")
sys.stdout.flush()
""".replace("MARKER", repr(MARKER))

#: How the script is run, and what to do when its report cannot be read.
_PROBE = ReportProbe(
    engine="vLLM",
    script=SCRIPT,
    marker=MARKER,
    missing="set engine.python to the bin/python of the environment vLLM is installed in, " + _PIN,
    slow="check that the interpreter starts, " + _PIN,
    unrunnable=_PIN,
    failed="run the same interpreter by hand to see why it fails, " + _PIN,
    not_importable="install vLLM for that interpreter, or set engine.python to the one it is "
    "installed in, " + _PIN,
)


def detect_flags(
    python: str,
    launch_prefix: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = DETECT_TIMEOUT_S,
) -> VLLMFlags:
    """Read the version and options of the vLLM that ``[*launch_prefix, python]`` imports.

    Raises:
        EngineError: the interpreter cannot be run, vLLM is not importable there, or the import
            took longer than ``timeout_s``; the message says which and what to do.
    """
    found = _PROBE.read(python, launch_prefix, env=env, timeout_s=timeout_s)
    return flags_from_report(found.report, source=f"detected from {found.where}")


def flags_from_report(report: Mapping[str, Any], *, source: str) -> VLLMFlags:
    """Build :class:`VLLMFlags` from the JSON the detection script prints.

    Raises:
        EngineError: the report is not in the expected shape.
    """
    raw = report.get("options")
    if not isinstance(raw, Mapping):
        raise EngineError(f"vLLM's flag report ({source}) has no options")
    options: dict[str, tuple[str, ...] | None] = {}
    for name, choices in raw.items():
        if choices is not None and not isinstance(choices, list):
            raise EngineError(f"vLLM's flag report ({source}) has a malformed entry {name!r}")
        options[str(name)] = None if choices is None else tuple(str(c) for c in choices)
    version = report.get("version")
    return VLLMFlags(
        version=None if version is None else str(version), options=options, source=source
    )
