"""``python -m autotune.sim``: the simulated server, started exactly like ``sglang serve`` or
``vllm serve``.

It takes SGLang's command line (see :mod:`autotune.sim._args`), or vLLM's when the first word is
``serve`` (``python -m autotune.sim serve MODEL ...``, see :mod:`autotune.sim._vllm_args`), plus
``--sim-*`` options; applies the engine's argument rules, prints its start-up log with the
modelled durations (scaled by ``--sim-time-scale``), dies the way the engine dies when the model
says the configuration crashes, and otherwise serves the engine's HTTP endpoints with tokens
paced at the modelled speed (or ``K`` times slower with ``--sim-serve-scale K``) until SIGTERM or
SIGINT, after which it exits with code 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from autotune._errors import AutotuneError
from autotune.sim._args import ArgumentRuleError, LaunchArgs, parse_launch_args
from autotune.sim._logging import SGLangLog
from autotune.sim._process import READY_LINE, SimProcess

__all__ = ["READY_LINE", "main"]


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Run the simulated server; return its exit code (argparse errors: 2)."""
    args = list(sys.argv[1:] if argv is None else argv)
    vllm = bool(args) and args[0] == "serve"
    try:
        launch = _parse(args, prog=prog, vllm=vllm)
    except SystemExit as e:  # argparse printed its usage and message (or --help)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    log: SGLangLog
    if vllm:
        from autotune.sim._vllm_log import VLLMLog

        log = VLLMLog(sys.stderr)
    else:
        log = SGLangLog(sys.stderr)
    for message in launch.deprecations:
        log.raw(message)
    try:
        return _process(launch, log, vllm=vllm).run()
    except ArgumentRuleError as e:
        for line in e.lines:
            log.raw(line)
        return e.exit_code
    except AutotuneError as e:
        hint = f" (hint: {e.hint})" if e.hint else ""
        sys.stderr.write(f"{prog or 'autotune.sim'}: error: {e.message}{hint}\n")
        sys.stderr.flush()
        return e.exit_code


def _parse(args: list[str], *, prog: str | None, vllm: bool) -> LaunchArgs:
    if not vllm:
        return parse_launch_args(args, prog=prog)
    from autotune.sim._vllm_args import parse_vllm_args

    return parse_vllm_args(args, prog=f"{prog} serve" if prog else None)


def _process(launch: LaunchArgs, log: SGLangLog, *, vllm: bool) -> SimProcess:
    if not vllm:
        return SimProcess(launch, log, env=dict(os.environ))
    from autotune.sim._vllm_serving import VLLMProcess

    return VLLMProcess(launch, log, env=dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
