"""Running an engine's own parser in the interpreter that will run its server, for its report.

SGLang's and vLLM's flags are read the same way: a short script (the standard library only) runs
in ``[*launch_prefix, python]``, imports the engine's argument parser and prints one JSON line
after a marker, so that whatever the engine prints while importing is ignored. Nothing of the
engine is imported into this process: it may live in another environment, container or machine.
What the report holds is the engine's business (:mod:`autotune.engines.sglang._detect`,
:mod:`autotune.engines.vllm._flags`); how it is run, found and its failures told is here.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune._errors import EngineError
from autotune._redact import redact_text


@dataclass(frozen=True)
class ReportProbe:
    """One engine's parser script and what to tell the user when its report cannot be read.

    ``engine`` names the engine in messages ("SGLang"); ``script`` runs in the engine's
    interpreter and prints its JSON report after ``marker``. The advice, by the way the run
    failed: ``missing``, the interpreter (or the prefix's program) was not found; ``slow``, it ran
    past the time allowed; ``unrunnable``, it could not be started; ``failed``, it printed no
    report; ``not_importable``, the engine does not import there.
    """

    engine: str
    script: str
    marker: str
    missing: str
    slow: str
    unrunnable: str
    failed: str
    not_importable: str

    def read(
        self,
        python: str,
        launch_prefix: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float,
    ) -> ParserReport:
        """Run the script with ``[*launch_prefix, python]`` (``env`` added to this process's
        environment) and return its report.

        Raises:
            EngineError: the interpreter or prefix cannot be run, it printed no report, the
                report says the engine is not importable there, or the run took longer than
                ``timeout_s``.
        """
        return read_report(self, python, launch_prefix, env=env, timeout_s=timeout_s)


@dataclass(frozen=True)
class ParserReport:
    """The JSON report the script printed, and the command line that printed it (``where``)."""

    report: dict[str, Any]
    where: str


def read_report(
    probe: ReportProbe,
    python: str,
    launch_prefix: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    timeout_s: float,
) -> ParserReport:
    """See :meth:`ReportProbe.read`."""
    engine, advice, marker = probe.engine, probe, probe.marker
    argv = [*launch_prefix, python, "-c", probe.script]
    where = " ".join([*launch_prefix, python])
    try:
        done = subprocess.run(
            argv,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError as e:
        raise EngineError(
            f"cannot read {engine}'s flags: {argv[0]!r} was not found", hint=advice.missing
        ) from e
    except subprocess.TimeoutExpired as e:
        raise EngineError(
            f"reading {engine}'s flags with {where} took longer than {timeout_s:.0f} s",
            hint=advice.slow,
        ) from e
    except OSError as e:
        raise EngineError(
            f"cannot run {where} to read {engine}'s flags: {e}", hint=advice.unrunnable
        ) from e
    report = _find_report(done.stdout, marker)
    if report is None:
        tail = _tail(done.stderr or done.stdout)
        raise EngineError(
            f"could not read {engine}'s flags with {where}: exit code {done.returncode}"
            + (f": {tail}" if tail else ""),
            hint=advice.failed,
        )
    if "error" in report:
        raise EngineError(
            f"{engine} is not importable by {where}: {redact_text(str(report['error']))}",
            hint=advice.not_importable,
        )
    return ParserReport(report, where)


def _find_report(stdout: str, marker: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(marker):
            try:
                value = json.loads(line[len(marker) :])
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return redact_text(" | ".join(kept))
