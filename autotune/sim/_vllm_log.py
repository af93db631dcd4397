"""vLLM-style log output of the simulated server.

vLLM's API server and its engine core are two processes that log to the same standard error,
each line tagged with its process (``(APIServer pid=41) ``, ``(EngineCore_DP0 pid=57) ``) and
its logger's ``LEVEL MM-DD HH:MM:SS [file.py:line] `` prefix; traceback lines carry only the
process tag, and tqdm's progress bars (``Capturing CUDA graphs ...``) no prefix at all.

A record of the simulated start-up names its process and its logger's place in its first
words: ``"engine INFO [gpu_worker.py:456] Available KV cache memory: 52.31 GiB"``, ``"api ERROR
[...] ..."``, ``"bare ..."`` for a line printed as it is, or ``"apitrace ..."`` for the API
server's uncaught exception (its traceback, every line tagged); the lines after the first (a
traceback) get the process tag only. :class:`VLLMLog` writes them so, flushing every line.
"""

from __future__ import annotations

import os
import time
from typing import TextIO

from autotune.sim._logging import SGLangLog

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def api(level: str, where: str, message: str) -> str:
    """A record of the API server's logger."""
    return f"api {level} [{where}] {message}"


def engine(level: str, where: str, message: str) -> str:
    """A record of the engine core's logger."""
    return f"engine {level} [{where}] {message}"


def bare(text: str) -> str:
    """A record printed without any prefix (a progress bar)."""
    return f"bare {text}"


class VLLMLog(SGLangLog):
    """Writes vLLM-style log lines to one stream (standard error by default).

    It keeps the writer interface of :class:`~autotune.sim._logging.SGLangLog` (:meth:`main`
    for the API server, :meth:`rank` for the engine core, :meth:`raw`, :meth:`record`), so
    that the serving loop and the HTTP layer log through either.
    """

    def __init__(self, stream: TextIO, *, pid: int | None = None) -> None:
        super().__init__(stream)
        self.api_pid = os.getpid() if pid is None else pid
        self.engine_pid = self.api_pid + 16

    @staticmethod
    def stamp() -> str:
        return time.strftime("%m-%d %H:%M:%S")

    @property
    def api_tag(self) -> str:
        return f"(APIServer pid={self.api_pid}) "

    @property
    def engine_tag(self) -> str:
        return f"(EngineCore_DP0 pid={self.engine_pid}) "

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # the reader went away: the server keeps serving without its log

    def log(self, process: str, level: str, where: str, message: str) -> None:
        tag = self.engine_tag if process == "engine" else self.api_tag
        self._write(f"{tag}{level} {self.stamp()} [{where}] {message}")

    def main(self, message: str) -> None:
        """A line of the API server: uvicorn's ``INFO:     ...`` lines as they are, others
        through its logger."""
        if message.startswith(("INFO:", "ERROR:", "WARNING:")):
            self._write(self.api_tag + message)
        else:
            self.log("api", "INFO", "api_server.py:1971", message)

    def rank(self, message: str) -> None:
        """An INFO line of the engine core."""
        self.log("engine", "INFO", "loggers.py:259", message)

    def raw(self, line: str) -> None:
        self._write(line)

    def record(self, text: str) -> None:
        """One record (see the module docstring); a record of another shape goes to the
        engine core's INFO log."""
        first, *rest = text.split("\n")
        process, _, body = first.partition(" ")
        if process == "bare":
            self._write(body)
            tag = ""
        elif process == "apitrace":  # an uncaught exception of the API server
            self._write(self.api_tag + body)
            tag = self.api_tag
        elif process in ("api", "engine"):
            level, _, after = body.partition(" ")
            where, _, message = after.partition("] ")
            if level not in _LEVELS or not where.startswith("["):
                self.log(process, "INFO", "core.py:98", body)
            else:
                self.log(process, level, where[1:], message)
            tag = self.engine_tag if process == "engine" else self.api_tag
        else:
            self.rank(first)
            tag = self.engine_tag
        for line in rest:
            self._write(tag + line)
