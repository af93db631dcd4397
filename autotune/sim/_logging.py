"""SGLang-style log output of the simulated server.

SGLang logs through Python's logging to standard error with the prefix ``[YYYY-mm-dd HH:MM:SS
TP0] `` for lines of a tensor-parallel rank and ``[YYYY-mm-dd HH:MM:SS] `` for lines of the main
process; traceback lines carry no prefix. :class:`SGLangLog` writes exactly that, flushing after
every line so that a watcher reading the log file sees each line the moment it is printed.

The periodic ``Decode batch`` and ``Prefill batch`` lines follow the release the server imitates:
dialect ``0.5.23`` writes ``Decode batch, ...`` and reports the accept rate as accepted drafts
over proposed drafts; dialect ``0.5.3`` writes ``Decode batch. ...`` and reports the accept rate
as the accept length over the number of draft tokens, as those releases did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TextIO

#: Records SGLang's main process prints (the rest come from the tensor-parallel ranks).
_MAIN_PROCESS = ("server_args=", "Received sigquit", "The server is fired up", "INFO:  ")
#: Where the traceback lines of the imitated release say SGLang is installed.
SITE_PACKAGES = "/usr/local/lib/python3.12/dist-packages"


@dataclass(frozen=True)
class WindowStats:
    """What happened between two ``Decode batch`` lines."""

    running: int
    used_tokens: int
    token_usage: float
    queued: int
    generated_tokens: int
    elapsed_s: float
    verify_ct: int
    accepted_tokens: int
    accepted_drafts: int
    cuda_graph: bool


class SGLangLog:
    """Writes SGLang-style log lines to one stream (standard error by default)."""

    def __init__(self, stream: TextIO, *, rank: str = "TP0") -> None:
        self.stream = stream
        self.rank_name = rank

    @staticmethod
    def stamp() -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            # The reader went away (closed pipe): the server keeps serving without its log.
            pass

    def rank(self, message: str) -> None:
        """A line of the tensor-parallel rank: ``[time TP0] message``."""
        self._write(f"[{self.stamp()} {self.rank_name}] {message}")

    def main(self, message: str) -> None:
        """A line of the main process: ``[time] message``."""
        self._write(f"[{self.stamp()}] {message}")

    def raw(self, line: str) -> None:
        """A line exactly as given (argparse output, traceback frames)."""
        self._write(line)

    def record(self, text: str) -> None:
        """One log record: the prefix before its first line, further lines bare (a traceback).

        Records of the main process (``server_args=...``, the sigquit notice) get the main
        prefix, all others the rank's.
        """
        first, *rest = text.split("\n")
        if first.startswith(_MAIN_PROCESS):
            self.main(first)
        else:
            self.rank(first)
        for line in rest:
            self.raw(line)


def decode_line(dialect: str, w: WindowStats, *, speculative: bool, num_draft_tokens: int) -> str:
    """The periodic decode line of the given release (see the module docstring)."""
    sep = "." if dialect == "0.5.3" else ","
    msg = (
        f"Decode batch{sep} #running-req: {w.running}, #token: {w.used_tokens}, "
        f"token usage: {w.token_usage:.2f}, "
    )
    if speculative:
        accept_len = w.accepted_tokens / w.verify_ct if w.verify_ct else 0.0
        if dialect == "0.5.3":
            rate = accept_len / num_draft_tokens if num_draft_tokens else 0.0
        else:
            proposed = w.verify_ct * max(0, num_draft_tokens - 1)
            rate = w.accepted_drafts / proposed if proposed else 0.0
        msg += f"accept len: {accept_len:.2f}, accept rate: {rate:.2f}, "
    throughput = w.generated_tokens / w.elapsed_s if w.elapsed_s > 0 else 0.0
    msg += (
        f"cuda graph: {w.cuda_graph}, gen throughput (token/s): {throughput:.2f}, "
        f"#queue-req: {w.queued}, "
    )
    return msg.rstrip() if dialect != "0.5.3" else msg


def prefill_line(
    dialect: str,
    *,
    new_seq: int,
    new_tokens: int,
    token_usage: float,
    running: int,
    queued: int,
    input_throughput: float,
) -> str:
    """The line SGLang prints for every prefill batch."""
    if dialect == "0.5.3":
        return (
            f"Prefill batch. #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: 0, "
            f"token usage: {token_usage:.2f}, #running-req: {running}, #queue-req: {queued}, "
        )
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: 0, "
        f"token usage: {token_usage:.2f}, #running-req: {running}, #queue-req: {queued}, "
        f"#pending-token: 0, cuda graph: False, "
        f"input throughput (token/s): {input_throughput:.2f}"
    )


def uvicorn_log_config(*, access_log: bool) -> dict[str, Any]:
    """Logging configuration for uvicorn: SGLang's ``[time] INFO:     ...`` shape on stderr.

    Uvicorn's own start-up messages are left to the server (it prints them in SGLang's order);
    warnings and errors of uvicorn and, when asked, one access line per request are kept.
    """
    formatter = {
        "()": "uvicorn.logging.DefaultFormatter",
        "fmt": "[%(asctime)s] %(levelprefix)s %(message)s",
        "datefmt": "%Y-%m-%d %H:%M:%S",
        "use_colors": False,
    }
    access = {
        "()": "uvicorn.logging.AccessFormatter",
        "fmt": '[%(asctime)s] %(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s',
        "datefmt": "%Y-%m-%d %H:%M:%S",
        "use_colors": False,
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter, "access": access},
        "handlers": {
            "default": {
                "formatter": "default",
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
            },
            "access": {
                "formatter": "access",
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
            },
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "WARNING", "propagate": False},
            "uvicorn.error": {"level": "WARNING"},
            "uvicorn.access": {
                "handlers": ["access"],
                "level": "INFO" if access_log else "WARNING",
                "propagate": False,
            },
        },
    }


def uvicorn_started_lines(host: str, port: int, pid: int) -> tuple[str, ...]:
    """The messages uvicorn prints when it starts, as SGLang's log shows them."""
    shown = f"[{host}]" if ":" in host else host
    return (
        f"INFO:     Started server process [{pid}]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
        f"INFO:     Uvicorn running on http://{shown}:{port} (Press CTRL+C to quit)",
    )


# Where each rule raises, per release: (file under sglang/, line, function, source line).
_RULE_SITES = {
    "no_algorithm": ("srt/arg_groups/validation_hook.py", 224, "check_server_args",
                     "raise ValueError("),
    "unknown_algorithm": ("srt/speculative/spec_info.py", 65, "from_string",
                          'raise ValueError(f"Unknown speculative algorithm name: {name}")'),
    "assert_all_or_none": ("srt/arg_groups/speculative_hook.py", 1160, "_handle_eagle_family",
                           "assert ("),
    "trtllm_topk": ("srt/arg_groups/speculative_hook.py", 1179, "_handle_eagle_family",
                    "raise ValueError("),
    "topk_compare": ("srt/arg_groups/speculative_hook.py", 1274, "_handle_eagle_family",
                     "cfg.speculative_eagle_topk > 1"),
    "page_tree": ("srt/arg_groups/speculative_hook.py", 1278, "_handle_eagle_family",
                  "raise ValueError("),
    "draft_none": ("srt/speculative/eagle_worker.py", 142, "__init__",
                   "self.speculative_num_draft_tokens - 1"),
    "flex": ("srt/arg_groups/attention_hook.py", 161, "_handle_attention_backend_compatibility",
             "assert cfg.speculative_algorithm is None, ("),
    "attention": ("srt/arg_groups/attention_hook.py", 203,
                  "_handle_attention_backend_compatibility", "raise ValueError("),
    "pipeline": ("srt/arg_groups/validation_hook.py", 132, "check_pipeline_parallel_compat",
                 "assert ("),
}  # fmt: skip


def argument_traceback(dialect: str, site: str, exception_line: str) -> tuple[str, ...]:
    """The traceback SGLang prints when its argument rule ``site`` raises ``exception_line``."""
    sp = f"{SITE_PACKAGES}/sglang"
    lines = [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
    ]
    path, line, func, code = _RULE_SITES[site]
    if dialect == "0.5.3":
        lines += [
            f'  File "{sp}/launch_server.py", line 11, in <module>',
            "    server_args = prepare_server_args(sys.argv[1:])",
            f'  File "{sp}/srt/server_args.py", line 2766, in prepare_server_args',
            "    return ServerArgs.from_cli_args(raw_args)",
            f'  File "{sp}/srt/server_args.py", line 2451, in from_cli_args',
            "    return cls(**{attr: getattr(args, attr) for attr in attrs})",
            '  File "<string>", line 267, in __init__',
            f'  File "{sp}/srt/server_args.py", line 537, in __post_init__',
            "    self._handle_speculative_decoding()",
        ]
        if not path.startswith("srt/speculative/"):
            path, line, func = "srt/server_args.py", 1241, "_handle_speculative_decoding"
    else:
        lines += [
            f'  File "{sp}/launch_server.py", line 84, in <module>',
            "    run_server(server_args)",
            f'  File "{sp}/launch_server.py", line 29, in run_server',
            "    server_args.resolve_once()",
            f'  File "{sp}/srt/server_args.py", line 262, in resolve_once',
            "    self._run_resolution_hooks()",
        ]
    lines += [f'  File "{sp}/{path}", line {line}, in {func}', f"    {code}", exception_line]
    return tuple(lines)
