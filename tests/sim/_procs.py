"""Start the simulated server as a real process: own process group, log file, free port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

READY_LINE = "The server is fired up and ready to roll!"
FAST_PROFILE = "h100-llama-3.1-8b"
FAST_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SEED_PROFILE = "rtxpro6000x8-kimi-k2.5"
SEED_MODEL = "moonshotai/Kimi-K2.5"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SimServer:
    """One simulated server process, its port and its log file."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.proc = proc
        self.port = port
        self.log_path = log_path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, text: str, timeout: float = 20.0) -> bool:
        """Whether ``text`` appears in the log before ``timeout`` or the process's exit."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return True
            if self.proc.poll() is not None:
                return text in self.log()
            time.sleep(0.02)
        return False

    def wait_exit(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout=timeout)

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM to the process (as a process manager sends it); its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


class SimLauncher:
    """Starts simulated servers; every process it started is killed in :meth:`close`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.servers: list[SimServer] = []

    def spawn(
        self,
        *args: str,
        profile: str = FAST_PROFILE,
        model: str = FAST_MODEL,
        time_scale: str = "0.0001",
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        entry: str = "module",
    ) -> SimServer:
        port = port or free_port()
        log_path = self.directory / f"sim-{port}-{len(self.servers)}.log"
        command = ["autotune", "sim", "serve"] if entry == "cli" else ["autotune.sim"]
        argv = [sys.executable, "-m", *command, "--model-path", model]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--sim-profile", profile]
        argv += ["--sim-time-scale", time_scale, *args]
        full_env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES",)}
        full_env.update(env or {})
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                start_new_session=True,
            )
        server = SimServer(proc, port, log_path)
        self.servers.append(server)
        return server

    def start(self, *args: str, timeout: float = 30.0, **kwargs: object) -> SimServer:
        """A server that reached its ready line (the test fails with the log otherwise)."""
        server = self.spawn(*args, **kwargs)  # type: ignore[arg-type]
        if not server.wait_for(READY_LINE, timeout):
            server.kill()
            pytest.fail(f"simulated server did not become ready:\n{server.log()}")
        return server

    def run(self, *args: str, timeout: float = 30.0, **kwargs: object) -> tuple[int, str]:
        """A server expected to exit by itself: its exit code and log."""
        server = self.spawn(*args, **kwargs)  # type: ignore[arg-type]
        try:
            code = server.wait_exit(timeout)
        except subprocess.TimeoutExpired:
            server.kill()
            pytest.fail(f"simulated server did not exit:\n{server.log()}")
        return code, server.log()

    def close(self) -> None:
        for server in self.servers:
            server.kill()
