"""Helpers of the study and report tests.

The ``autotune`` command run as a user runs it (a subprocess from the repository root), small
copies of the shipped search spaces that run in seconds on the simulated server, and plain-Optuna
access to what a study recorded (the trial record, the artifacts), independent of autotune's own
reading code.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

REPO = Path(__file__).resolve().parents[2]
SPACES = REPO / "search_spaces"

#: The user attributes the trial record promises on every finished trial (design: trial record).
RECORD_KEYS: tuple[str, ...] = (
    "outcome",
    "output_tok_s",
    "accept_length",
    "accept_rate",
    "ttft_p99_ms",
    "itl_p99_ms",
    "startup_s",
    "command",
    "failure_line",
    "role",
    "config",
)

#: The hand-tuned EAGLE-3 configuration of the seed system (enqueued in eagle3.yaml).
SEED_TUNED: dict[str, Any] = {
    "speculative_num_steps": 2,
    "speculative_eagle_topk": 4,
    "speculative_num_draft_tokens": 4,
    "cuda_graph_max_bs": 128,
    "mem_fraction_static": 0.88,
    "allreduce": "nccl",
}

#: Configurations of the seed system that fail, each in its own way, in the order enqueued.
SEED_FAILURES: tuple[tuple[str, dict[str, Any]], ...] = (
    # the KV pool does not fit: a start-up crash, seconds after launch (just below the edge
    # that the hand-tuned start's memory lines show, too close to it to be refused by them)
    ("oom_kv_pool", {**SEED_TUNED, "mem_fraction_static": 0.79}),
    # FlashInfer all-reduce fusion does not support SM120: refused before launch
    ("infeasible", {**SEED_TUNED, "allreduce": "flashinfer_fusion"}),
    # CUDA graphs of a deep draft at a high static fraction: a capture crash
    (
        "oom_cuda_graph",
        {
            **SEED_TUNED,
            "speculative_num_steps": 5,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 6,
            "mem_fraction_static": 0.92,
        },
    ),
)


def autotune_argv() -> list[str]:
    """The ``autotune`` command of this environment (its console script, else ``-m``)."""
    script = Path(sys.executable).with_name("autotune")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "autotune"]


@dataclass(frozen=True)
class CliRun:
    """One finished ``autotune`` command."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float

    def describe(self) -> str:
        return (
            f"autotune {' '.join(self.args)} -> {self.returncode} in {self.wall_s:.1f} s\n"
            f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        )


def run_cli(
    *args: str,
    cwd: Path = REPO,
    timeout: float = 600.0,
    env: Mapping[str, str] | None = None,
    own_process: bool = False,
) -> CliRun:
    """Run ``autotune ARGS`` and wait for it.

    By default the command runs in this process through :func:`autotune.cli.main`, the entry
    point that ``python -m autotune`` calls, with its output, working directory and environment
    its own for the call: the behaviour under test is the command's, and a fresh interpreter
    per call only added its start-up. ``own_process`` runs the installed command as a process of
    its own, for the facts that only a process has (its exit on a signal, its process group, a
    wall-clock limit): past ``timeout`` it gets SIGINT (so that it stops its server the way
    Ctrl-C does), then SIGKILL; the test then fails with what it printed.
    """
    environ = dict(os.environ)
    environ["AUTOTUNE_NO_PROGRESS"] = "1"
    environ.update(env or {})
    if not own_process:
        return run_in_process(args, cwd, environ)
    started = time.monotonic()
    proc = subprocess.Popen(
        [*autotune_argv(), *args],
        cwd=cwd,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        raise AssertionError(
            f"autotune {' '.join(args)} ran past {timeout:.0f} s\n{stdout}\n{stderr}"
        ) from None
    return CliRun(tuple(args), proc.returncode, stdout, stderr, time.monotonic() - started)


def run_in_process(args: Sequence[str], cwd: Path, environ: Mapping[str, str]) -> CliRun:
    """``autotune ARGS`` through :func:`autotune.cli.main` in this process.

    The environment and working directory are the command's for the call and restored after;
    what it writes to stdout and stderr is captured. Logging is as in a process of its own: the
    root logger without pytest's handlers, so that a warning logged where autotune has no
    handler of its own reaches stderr through logging's last resort, as it does for a user. An
    exception that escapes ``main`` (a bug) becomes exit code 1 with its traceback on stderr, as
    the interpreter reports it.
    """
    import contextlib
    import gc
    import io
    import logging
    import traceback

    from autotune.cli import main

    saved_env = dict(os.environ)
    saved_cwd = Path.cwd()
    root = logging.getLogger()
    ours = logging.getLogger("autotune")
    saved_handlers, saved_level = list(root.handlers), ours.level
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    try:
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        root.handlers = []
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except Exception:  # a bug: reported the way the interpreter reports it
                traceback.print_exc()
                code = 1
    finally:
        gc.collect()  # what the command left open (its storage's connections) closes, as at exit
        root.handlers = saved_handlers
        ours.setLevel(saved_level)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return CliRun(tuple(args), code, out.getvalue(), err.getvalue(), time.monotonic() - started)


def small_space(
    dest: Path,
    source: str = "eagle3-h100.yaml",
    *,
    time_scale: float = 0.001,
    workload: Mapping[str, Any] | None = None,
    configs: Sequence[Mapping[str, Any]] | None = None,
    baseline: Any = None,
    edit: Mapping[str, Any] | None = None,
    confirm: Any = False,
) -> Path:
    """A copy of a shipped space that runs in seconds: a tiny workload, a small time scale.

    ``configs`` are enqueued after the file's own; ``baseline`` replaces ``enqueue.baseline``
    when given; ``edit`` replaces top-level sections; ``confirm`` is the space's ``confirm``
    section (off: the tests of confirmation turn it on).
    """
    doc = yaml.safe_load((SPACES / source).read_text(encoding="utf-8"))
    doc["engine"]["port"] = free_port()  # the first port tried; another is taken if it is busy
    sim = doc["engine"].setdefault("sim", {})
    sim.update(time_scale=time_scale, seed=3, noise=0.01)
    doc["workload"].update(
        {"num_prompts": 2, "warmup": 0, "output_len": 32, **dict(workload or {})}
    )
    enqueue = doc.setdefault("enqueue", {})
    if configs:
        enqueue["configs"] = [*enqueue.get("configs", []), *(dict(c) for c in configs)]
    if baseline is not None:
        enqueue["baseline"] = baseline
    doc["confirm"] = confirm
    doc.update(dict(edit or {}))
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"small-{source}"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def seed_space_with_failures(dest: Path) -> Path:
    """The seed system's space (eagle3.yaml), small, with :data:`SEED_FAILURES` enqueued."""
    return small_space(
        dest,
        "eagle3.yaml",
        time_scale=0.0005,
        workload={"num_prompts": 2, "concurrency": 2, "output_len": 24},
        configs=[config for _, config in SEED_FAILURES],
    )


@dataclass(frozen=True)
class StudyRun:
    """A study that a test ran with ``autotune study start``."""

    name: str
    studies_dir: Path
    space: Path
    n_trials: int
    start: CliRun

    @property
    def db(self) -> Path:
        return self.studies_dir / f"{self.name}.db"

    @property
    def storage_url(self) -> str:
        return f"sqlite:///{self.db}"

    @property
    def artifacts_dir(self) -> Path:
        return self.studies_dir / f"{self.name}-artifacts"

    def cli_args(self) -> tuple[str, ...]:
        return ("--study-name", self.name, "--studies-dir", str(self.studies_dir))

    def load(self) -> optuna.Study:
        """The study, opened with plain Optuna."""
        return optuna.load_study(study_name=self.name, storage=self.storage_url)


def start_study(
    space: Path,
    name: str,
    n_trials: int,
    studies_dir: Path,
    *extra: str,
    timeout: float = 600.0,
) -> StudyRun:
    """``autotune study start`` as a user types it; fails the test if it fails."""
    run = run_cli(
        "study",
        "start",
        "--space",
        str(space),
        "--study-name",
        name,
        "--n-trials",
        str(n_trials),
        "--studies-dir",
        str(studies_dir),
        "--no-progress",
        *extra,
        timeout=timeout,
    )
    assert run.returncode == 0, run.describe()
    return StudyRun(name, studies_dir, space, n_trials, run)


def finished_trials(study: optuna.Study) -> list[FrozenTrial]:
    """COMPLETE and PRUNED trials, by number."""
    states = (TrialState.COMPLETE, TrialState.PRUNED)
    return sorted(study.get_trials(deepcopy=False, states=states), key=lambda t: t.number)


def best_measured(study: optuna.Study) -> FrozenTrial | None:
    """The best measured trial within the space's constraints: the first of equal values."""
    candidates = [
        t
        for t in finished_trials(study)
        if t.state == TrialState.COMPLETE
        and t.value is not None
        and t.user_attrs.get("outcome") == "ok"
        and all(v <= 0 for v in t.constraints.values())
    ]
    if not candidates:
        return None
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    best = candidates[0]
    for t in candidates[1:]:
        assert t.value is not None and best.value is not None
        if (t.value > best.value) if maximize else (t.value < best.value):
            best = t
    return best


def artifact_files(run: StudyRun, study: optuna.Study, trial: FrozenTrial) -> dict[str, Path]:
    """A trial's artifacts by file name, each the path of its copy in the artifact store."""
    metas = optuna.artifacts.get_all_artifact_meta(trial, storage=study._storage)
    return {m.filename: run.artifacts_dir / m.artifact_id for m in metas}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
