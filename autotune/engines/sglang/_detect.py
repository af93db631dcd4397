"""Detection of an SGLang release's version and command-line options from its own parser.

The interpreter the server will run under (behind the launch prefix, e.g. ``docker exec NAME``)
imports ``sglang.srt.server_args``, builds SGLang's parser with ``ServerArgs.add_cli_args`` and
prints, as one JSON line, the version, every option string with its destination, arity,
choices, type and deprecation, the installation's ``sglang`` console script where the
release has ``sglang serve`` (0.5.5 and newer; the entrypoint SGLang recommends), and which of
the environment variables autotune sets its ``sglang.srt.environ`` declares. Nothing is
imported into this process: the SGLang being tuned may live in another environment, container or
machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune._errors import EngineError
from autotune.engines._report import ReportProbe
from autotune.engines.sglang._dialects import FlagSet, OptionInfo, env_names

#: Seconds allowed for importing SGLang's parser (a cold import on a busy box takes a minute).
DETECT_TIMEOUT_S = 180.0
#: Prefix of the report line, so that what SGLang prints while importing is ignored.
MARKER = "AUTOTUNE-SGLANG-FLAGS "


#: Runs in the SGLang interpreter; kept to Python 3.8 syntax and the standard library.
SCRIPT = r"""
import argparse, json, sys

def report():
    try:
        import sglang
        from sglang.srt.server_args import ServerArgs
    except BaseException as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}
    version = getattr(sglang, "__version__", None)
    if version is None:
        try:
            from sglang.version import __version__ as version
        except BaseException:
            version = None
    parser = argparse.ArgumentParser()
    try:
        ServerArgs.add_cli_args(parser)
    except BaseException as e:
        return {"error": "%s: %s" % (type(e).__name__, e), "version": version}
    options = {}
    for action in parser._actions:
        text = action.help if isinstance(action.help, str) else ""
        deprecated = (
            "deprecat" in text.lower()
            or "deprecat" in type(action).__name__.lower()
            or bool(getattr(action, "deprecated", False))
        )
        choices = None
        if action.choices is not None:
            try:
                choices = [str(c) for c in action.choices]
            except TypeError:
                choices = None
        nargs = action.nargs
        if not (nargs is None or isinstance(nargs, (int, str))):
            nargs = str(nargs)
        type_name = None
        if action.type is not None:
            type_name = getattr(action.type, "__name__", type(action.type).__name__)
        for option in action.option_strings:
            options[option] = {
                "dest": action.dest,
                "nargs": nargs,
                "choices": choices,
                "type": type_name,
                "flag": nargs == 0,
                "deprecated": deprecated,
            }
    return {
        "version": None if version is None else str(version),
        "options": options,
        "serve_script": serve_script(),
        "env": declared_env(ENV_NAMES),
    }

def declared_env(names):
    # Which of the environment variables autotune sets this release declares.
    try:
        from sglang.srt.environ import Envs
    except BaseException:
        return []
    return [name for name in names if hasattr(Envs, name)]

def serve_script():
    # The `sglang` console script of this installation, when the release has `sglang serve`:
    # in the interpreter's scripts folder (a virtual environment's bin/), or in the bin/ beside
    # the package (`pip install --target`).
    import importlib.util, os, sysconfig
    try:
        if importlib.util.find_spec("sglang.cli.serve") is None:
            return None
    except BaseException:
        return None
    import sglang
    root = os.path.dirname(os.path.dirname(os.path.abspath(sglang.__file__)))
    for folder in (sysconfig.get_path("scripts"), os.path.join(root, "bin")):
        path = os.path.join(folder or "", "sglang")
        try:
            with open(path) as f:
                text = f.read(4096)
        except (OSError, UnicodeDecodeError):
            continue
        if "sglang.cli.main" in text:
            return path
    return None

sys.stdout.write("\n" + MARKER + json.dumps(report()) + "\n")
sys.stdout.flush()
""".replace("MARKER", repr(MARKER)).replace("ENV_NAMES", repr(list(env_names())))

#: How the script is run, and what to do when its report cannot be read.
_PROBE = ReportProbe(
    engine="SGLang",
    script=SCRIPT,
    marker=MARKER,
    missing="set engine.python to the bin/python of the environment SGLang is installed in "
    "(and engine.launch_prefix if it runs elsewhere), or set engine.sglang_version",
    slow="check that the interpreter starts (a hung container, a slow network mount), "
    "or set engine.sglang_version to use autotune's table of flags",
    unrunnable="set engine.python to an interpreter you can run, or set engine.sglang_version",
    failed="run the same interpreter by hand to see why it fails, "
    "or set engine.sglang_version to use autotune's table of flags",
    not_importable="install SGLang for that interpreter, or set engine.python to the one it is "
    "installed in, or set engine.sglang_version",
)


def detect_flagset(
    python: str,
    launch_prefix: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = DETECT_TIMEOUT_S,
) -> FlagSet:
    """Read the version and options of the SGLang that ``[*launch_prefix, python]`` imports.

    ``env`` is added to this process's environment for the run (a space's ``engine.env``, which
    may carry the PYTHONPATH SGLang needs).

    Raises:
        EngineError: the interpreter or prefix cannot be run, SGLang is not importable there, or
            the import took longer than ``timeout_s``; the message says which and what to do.
    """
    found = _PROBE.read(python, launch_prefix, env=env, timeout_s=timeout_s)
    return flagset_from_report(found.report, source=f"detected from {found.where}")


def flagset_from_report(report: Mapping[str, Any], *, source: str) -> FlagSet:
    """Build a :class:`FlagSet` from the JSON the detection script prints.

    Raises:
        EngineError: the report is not in the expected shape.
    """
    raw_options = report.get("options")
    if not isinstance(raw_options, Mapping):
        raise EngineError(f"SGLang's flag report ({source}) has no options")
    options: dict[str, OptionInfo] = {}
    for name, raw in raw_options.items():
        if not isinstance(raw, Mapping) or not isinstance(raw.get("dest"), str):
            raise EngineError(f"SGLang's flag report ({source}) has a malformed entry {name!r}")
        choices = raw.get("choices")
        nargs = raw.get("nargs")
        options[str(name)] = OptionInfo(
            dest=raw["dest"],
            flag=bool(raw.get("flag")),
            choices=None if choices is None else tuple(str(c) for c in choices),
            nargs=nargs if isinstance(nargs, (int, str)) else None,
            type_name=raw.get("type") if isinstance(raw.get("type"), str) else None,
            deprecated=bool(raw.get("deprecated")),
        )
    version = report.get("version")
    script = report.get("serve_script")
    env = report.get("env")
    return FlagSet(
        version=None if version is None else str(version),
        options=options,
        source=source,
        serve_script=script if isinstance(script, str) and script else None,
        env_vars=frozenset(str(n) for n in env) if isinstance(env, list) else frozenset(),
    )
