"""The study suite's bench: small space files, the CLI (in this process, or as a real subprocess
where a test needs one), the trials read back from the study's storage, and two checks every
test gets (through the ``lab`` fixture of conftest.py): no finished trial is lost, and no server
process outlives its trial.

Every process a test starts carries ``AUTOTUNE_TEST_MARK`` (a value unique to the test) in its
environment, and every server a tuner launches inherits it next to ``AUTOTUNE_SERVER_TOKEN``: the
servers of a test are found by those two, also after their tuner was killed. At the end of the
session one line says how many faults and bad inputs were tried and what the two checks found.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from ._helpers import run_in_process

MARK_ENV = "AUTOTUNE_TEST_MARK"
TOKEN_ENV = "AUTOTUNE_SERVER_TOKEN"
FAST_PROFILE = "h100-llama-3.1-8b"
FAST_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
FAST_DRAFT = "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"
FINISHED = ("COMPLETE", "PRUNED")

#: Three configurations inside :data:`PARAMETERS` that SGLang's rules accept.
CONFIGS: tuple[dict[str, Any], ...] = (
    {
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
        "mem_fraction_static": 0.8,
    },
    {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 2,
        "speculative_num_draft_tokens": 5,
        "mem_fraction_static": 0.85,
    },
    {
        "speculative_num_steps": 1,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 2,
        "mem_fraction_static": 0.75,
    },
)
PARAMETERS: dict[str, Any] = {
    "speculative_num_steps": {"type": "int", "low": 1, "high": 4},
    "speculative_eagle_topk": {"type": "categorical", "choices": [1, 2, 4]},
    "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 8},
    "mem_fraction_static": {"type": "float", "low": 0.70, "high": 0.90, "step": 0.01},
}


@dataclass
class Tally:
    """What the suite tried and what its standing checks found, for the closing line."""

    faults: list[str] = field(default_factory=list)
    bad_inputs: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    outliving: list[str] = field(default_factory=list)
    checked: int = 0

    def line(self) -> str:
        return (
            f"fault suite: {len(self.faults)} faults and {len(self.bad_inputs)} bad inputs "
            f"tried; finished trials lost: {len(self.lost)}; server processes outliving their "
            f"trial: {len(self.outliving)}"
        )


TALLY = Tally()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Run:
    """A finished CLI command."""

    args: tuple[str, ...]
    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def show(self) -> str:
        command = " ".join(self.args)
        return f"autotune {command} -> {self.rc}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


class StudyLab:
    """One test's folder, processes and studies (see the module docstring)."""

    def __init__(self, root: Path, test_id: str) -> None:
        self.root = root
        self.test_id = test_id
        self.studies = root / "studies"
        self.mark = uuid.uuid4().hex
        self.env = dict(os.environ)
        self.env.update({MARK_ENV: self.mark, "AUTOTUNE_NO_PROGRESS": "1"})
        self.env.pop("CUDA_VISIBLE_DEVICES", None)
        self._spawned: list[subprocess.Popen[bytes]] = []
        self._storages: dict[str, Any] = {}
        self._seen: dict[tuple[str, str], dict[int, tuple[str, float | None]]] = {}

    # --- inputs ------------------------------------------------------------------------------
    def space(
        self,
        name: str = "tiny",
        *,
        faults: Sequence[str] = (),
        startup_s: float = 60.0,
        benchmark_s: float = 120.0,
        request_s: float = 60.0,
        stop_s: float = 10.0,
        time_scale: float = 0.005,
        port: int | None = None,
        python: str | None = None,
        baseline: bool = True,
        configs: Sequence[dict[str, Any]] = (),
        parameters: dict[str, Any] | None = None,
        file: str | None = None,
        confirm: Any = False,
        noise: float = 0.0,
        workload: dict[str, Any] | None = None,
        launch_prefix: Sequence[str] = (),
    ) -> Path:
        """Write a space of the fast simulated system with a tiny workload; its path
        (``confirm``: the space's confirm section, off unless a test confirms)."""
        engine: dict[str, Any] = {
            "kind": "sim",
            "model_path": FAST_MODEL,
            "draft_model_path": FAST_DRAFT,
            "tp_size": 1,
            "host": "127.0.0.1",
            "port": port or free_port(),
            "check_paths": False,
            "timeouts": {
                "startup_s": startup_s,
                "benchmark_s": benchmark_s,
                "request_s": request_s,
                "stop_s": stop_s,
                "gpu_release_s": 5,
            },
            "sim": {
                "profile": FAST_PROFILE,
                "dialect": "0.5.23",
                "time_scale": time_scale,
                "noise": noise,
                "faults": list(faults),
            },
        }
        if python is not None:
            engine["python"] = python
        if launch_prefix:
            engine["launch_prefix"] = list(launch_prefix)
        data = {
            "name": name,
            "engine": engine,
            "workload": {
                "name": "tiny",
                "concurrency": 2,
                "num_prompts": 4,
                "warmup": 0,
                "input_len": 64,
                "output_len": 16,
                "seed": 3,
                **(workload or {}),
            },
            "objective": {"metric": "output_tok_s"},
            "fixed": {"speculative_algorithm": "EAGLE3"},
            "parameters": parameters or PARAMETERS,
            "enqueue": {"baseline": baseline, "configs": [dict(c) for c in configs]},
            "confirm": confirm,
        }
        path = self.root / (file or f"{name}.yaml")
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def write(self, file: str, text: str) -> Path:
        path = self.root / file
        path.write_text(text)
        return path

    def sqlite_url(self, name: str) -> str:
        return f"sqlite:///{self.studies / (name + '.db')}"

    # --- commands ----------------------------------------------------------------------------
    def cli(
        self,
        *args: str,
        timeout: float = 180.0,
        servers_gone: bool = True,
        wrap: Sequence[str] = (),
        own_process: bool = False,
    ) -> Run:
        """Run ``autotune ARGS`` to its end; afterwards none of this test's servers may run.

        The command runs in this process (:func:`autotune.cli.main`, in the test's folder and
        environment, so its servers carry the test's mark) unless ``own_process`` or ``wrap``
        (a command around it) asks for a process of its own, started as from a terminal.
        """
        if not (own_process or wrap):
            done_here = run_in_process(args, self.root, self.env)
            run = Run(tuple(args), done_here.returncode, done_here.stdout, done_here.stderr)
            if servers_gone:
                self.check_no_servers(f"after `autotune {' '.join(args[:2])}` exited")
            return run
        argv = [*wrap, sys.executable, "-m", "autotune", *args]
        try:
            done = subprocess.run(
                argv,
                cwd=self.root,
                env=self.env,
                capture_output=True,
                timeout=timeout,
                preexec_fn=_as_from_a_terminal,
            )
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"autotune {' '.join(args)} still ran after {timeout} s: {e.stderr!r}")
        run = Run(tuple(args), done.returncode, done.stdout.decode(), done.stderr.decode())
        if servers_gone:
            self.check_no_servers(f"after `autotune {' '.join(args[:2])}` exited")
        return run

    def spawn(self, *args: str, log: str | None = None) -> subprocess.Popen[bytes]:
        """Start ``autotune ARGS`` in the background (output into files); stopped at teardown."""
        name = log or f"proc-{len(self._spawned)}"
        with (
            (self.root / f"{name}.out").open("wb") as out,
            (self.root / f"{name}.err").open("wb") as err,
        ):
            proc = subprocess.Popen(
                [sys.executable, "-m", "autotune", *args],
                cwd=self.root,
                env=self.env,
                stdout=out,
                stderr=err,
                preexec_fn=_as_from_a_terminal,
            )
        proc.args = (name, *args)  # type: ignore[assignment]
        self._spawned.append(proc)
        return proc

    def finish(self, proc: subprocess.Popen[bytes], timeout: float = 180.0) -> Run:
        """Wait for a spawned command; its exit code and output."""
        name, *args = proc.args  # type: ignore[misc]
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"autotune {' '.join(args)} still ran after {timeout} s")
        out = (self.root / f"{name}.out").read_text()
        err = (self.root / f"{name}.err").read_text()
        return Run(tuple(args), rc, out, err)

    # --- servers -----------------------------------------------------------------------------
    def servers(self) -> list[psutil.Process]:
        """Live processes of servers launched in this test (zombies do not count)."""
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                env = proc.environ()
            except psutil.Error:
                continue
            if env.get(MARK_ENV) == self.mark and TOKEN_ENV in env:
                found.append(proc)
        return found

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.05)
        pytest.fail(f"timed out waiting for {what}")

    def wait_server(self, timeout: float = 60.0) -> psutil.Process:
        """The simulated server process of this test, once one runs."""

        def sim() -> psutil.Process | None:
            for proc in self.servers():
                with contextlib.suppress(psutil.Error):
                    if "autotune.sim" in proc.cmdline():
                        return proc
            return None

        return self.wait_for("a server to be launched", sim, timeout)  # type: ignore[no-any-return]

    def check_no_servers(self, when: str) -> None:
        left = self.servers()
        if not left:
            return
        described = []
        for proc in left:
            with contextlib.suppress(psutil.Error):
                described.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        TALLY.outliving.extend(f"{self.test_id}: {d}" for d in described)
        _kill(left)
        pytest.fail(f"server processes outlived their trial {when}: {described}")

    # --- studies -----------------------------------------------------------------------------
    def storage(self, url: str) -> Any:
        import optuna

        if url not in self._storages:
            kwargs: dict[str, Any] = {}
            target = url
            if url.startswith("sqlite"):
                kwargs = {"connect_args": {"timeout": 60}}
            elif url.startswith("postgresql://"):  # the driver the dev extra installs
                target = "postgresql+psycopg2://" + url.split("://", 1)[1]
            self._storages[url] = optuna.storages.RDBStorage(target, engine_kwargs=kwargs)
        return self._storages[url]

    def trials(self, name: str, storage: str | None = None) -> list[Any]:
        """Every trial of study ``name``, read from its storage (and noted for the lost check)."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        url = storage or self.sqlite_url(name)
        study = optuna.load_study(study_name=name, storage=self.storage(url))
        trials = study.get_trials(deepcopy=False)
        seen = self._seen.setdefault((url, name), {})
        for t in trials:
            if t.state.name in FINISHED:
                seen[t.number] = (t.state.name, t.value)
        return trials

    def finished(self, name: str, storage: str | None = None) -> list[Any]:
        return [t for t in self.trials(name, storage) if t.state.name in FINISHED]

    def check_nothing_lost(self) -> None:
        """Every finished trial seen during the test is still there, unchanged."""
        lost = []
        for (url, name), seen in self._seen.items():
            now = {t.number: t for t in self.trials(name, url)}
            for number, (state, value) in seen.items():
                t = now.get(number)
                if t is None or t.state.name != state or t.value != value:
                    lost.append(f"{self.test_id}: {name} trial {number} ({state}, {value})")
        TALLY.lost.extend(lost)
        assert not lost, f"finished trials lost or changed: {lost}"

    def close(self) -> None:
        for proc in self._spawned:  # a failed test's commands: stopped as a user would
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
        try:
            self.check_no_servers("at the end of the test")
            self.check_nothing_lost()
        finally:
            for storage in self._storages.values():
                with contextlib.suppress(Exception):
                    storage.engine.dispose()


def _as_from_a_terminal() -> None:
    """Ctrl-C's default disposition in a command, also where the tests run in a background job
    (which starts with SIGINT ignored, and Python then never turns it into KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _kill(procs: Sequence[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)


def no_traceback(run: Run) -> None:
    assert "Traceback" not in run.text, run.show()


def attrs_of(trial: Any) -> dict[str, Any]:
    return dict(trial.user_attrs)
