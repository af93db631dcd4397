"""``autotune smoke``: the whole path of a study, checked on the user's own box in a minute or two.

Before a study spends 10-minute starts of a large model, a tiny model made on the box
(:mod:`autotune.smoke._tiny`) goes through the space's own engine, interpreter, launch prefix,
environment, extra arguments and tensor-parallel size:

1. ``engine``: the engine is installed where the server will run (its flags are read).
2. ``model``: the tiny model is made (heads divisible by the space's TP).
3. ``start``: a server of the tiny model starts and becomes ready (the space's speculative
   algorithm where the tiny model allows it: NGRAM always, STANDALONE with the tiny model as its
   own draft; EAGLE-family heads need a trained draft, so NGRAM stands in and the step says so).
4. ``benchmark``: one short benchmark over HTTP: output tok/s and, when speculating, the
   accept length.
5. ``stop``: the whole process tree stopped, its port and GPU memory free again.
6. ``low fraction``: a start with a static memory fraction too small for any KV pool, read as
   ``oom_kv_pool`` from the live log, then stopped and its GPU memory freed.

Each step passes or fails with the line that decided it; a failed step skips those that need it.
Server logs stay in the run folder, whose path the report gives.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from autotune._errors import AutotuneError
from autotune._knobs import ServerConfig
from autotune._workload import LengthDist, WorkloadSpec
from autotune.smoke._tiny import TinyModel, TinyModelSpec, make_tiny_model

if TYPE_CHECKING:
    from autotune.engines import Engine, LaunchSpec
    from autotune.server import ServerProcess, StartupResult
    from autotune.space import SearchSpace

log = logging.getLogger("autotune.smoke")

#: Algorithms the tiny model can run (NGRAM needs no draft; STANDALONE drafts with the model).
_TINY_ALGORITHMS = ("NGRAM", "STANDALONE")
#: The short benchmark: small enough for a minute, long enough for an accept length.
SMOKE_WORKLOAD = WorkloadSpec(
    name="smoke",
    num_prompts=16,
    warmup=2,
    concurrency=4,
    input_len=LengthDist(256),
    output_len=LengthDist(128),
    seed=0,
)


@dataclass(frozen=True)
class SmokeStep:
    """One step: ``passed`` is None when it was skipped (an earlier step failed)."""

    name: str
    passed: bool | None
    detail: str
    evidence: str | None = None
    seconds: float = 0.0
    figures: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class SmokeReport:
    """The steps of one smoke run, in order, and where its files are."""

    steps: tuple[SmokeStep, ...]
    folder: Path
    model: TinyModel | None

    @property
    def passed(self) -> bool:
        return all(step.passed for step in self.steps)

    def step(self, name: str) -> SmokeStep | None:
        return next((s for s in self.steps if s.name == name), None)

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "folder": str(self.folder),
            "model": None
            if self.model is None
            else {
                "path": str(self.model.path),
                "weight_bytes": self.model.weight_bytes,
                **dataclasses.asdict(self.model.spec),
            },
            "steps": [dataclasses.asdict(s) for s in self.steps],
        }


STEPS = ("engine", "model", "start", "benchmark", "stop", "low fraction")


def smoke_config(
    space: SearchSpace, model_path: str, *, runs_checkpoint: bool = True
) -> tuple[ServerConfig, str]:
    """The configuration the smoke start runs, and a note on how it was chosen.

    ``runs_checkpoint``: the engine runs the tiny model's files (a real server), so only what a
    tiny model can run is chosen; False (a simulated server): the space's own algorithm runs.
    """
    base = space.baseline_config()
    algorithms = _space_algorithms(space)
    if not runs_checkpoint:
        own = next((a for a in algorithms if a != "none"), None)
        if own is not None:
            return base.replace(speculative_algorithm=own), "the simulated server's own draft"
    chosen = next((a for a in algorithms if a in _TINY_ALGORITHMS), None)
    note = ""
    if chosen is None and any(a != "none" for a in algorithms):
        chosen = "NGRAM"
        others = ", ".join(a for a in algorithms if a != "none")
        note = f"{others} needs a draft model trained for the target; NGRAM stands in"
    if chosen == "NGRAM":
        return base.replace(
            speculative_algorithm="NGRAM",
            speculative_num_steps=None,
            speculative_eagle_topk=None,
            speculative_num_draft_tokens=8,
        ), note
    if chosen == "STANDALONE":
        return base.replace(
            speculative_algorithm="STANDALONE",
            speculative_num_steps=3,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=4,
        ), note or f"the tiny model drafts for itself ({model_path})"
    return base, note or "the space does not speculate"


def _space_algorithms(space: SearchSpace) -> list[str]:
    fixed = space.fixed.get("speculative_algorithm")
    param = space.parameter("speculative_algorithm")
    choices = getattr(param, "choices", None) if param is not None else None
    found = [fixed] if fixed is not None else list(choices or ())
    return ["none" if str(a).lower() == "none" else str(a).upper() for a in found]


class _Smoke:
    def __init__(
        self,
        space: SearchSpace,
        folder: Path,
        spec: TinyModelSpec | None,
        on_step: Callable[[SmokeStep], None],
    ) -> None:
        self.space = space
        self.folder = folder
        self.model_spec = spec
        self.on_step = on_step
        self.steps: list[SmokeStep] = []
        self.model: TinyModel | None = None

    def add(self, step: SmokeStep) -> SmokeStep:
        self.steps.append(step)
        self.on_step(step)
        return step

    def skip_rest(self, reason: str) -> None:
        done = {s.name for s in self.steps}
        for name in STEPS:
            if name not in done:
                self.add(SmokeStep(name, None, f"skipped: {reason}"))

    def run(self) -> SmokeReport:
        from autotune.engines import create_engine

        self.folder.mkdir(parents=True, exist_ok=True)
        spec = self.space.engine
        started = time.monotonic()
        model_dir = self.folder / "tiny-model"
        engine_spec = dataclasses.replace(
            spec, model_path=str(model_dir), draft_model_path=str(model_dir), check_paths=False
        )
        try:
            engine = create_engine(engine_spec)
            engine.check_installed()
            described = engine.describe()
        except AutotuneError as e:
            self.add(SmokeStep("engine", False, str(e), seconds=time.monotonic() - started))
            self.skip_rest("the engine is not usable")
            return self.report()
        self.add(SmokeStep("engine", True, described, seconds=time.monotonic() - started))

        started = time.monotonic()
        try:
            shape = self.model_spec or TinyModelSpec.for_tp(spec.tp_size)
            shape.check(spec.tp_size)
            self.model = make_tiny_model(model_dir, shape)
        except (AutotuneError, OSError) as e:
            self.add(SmokeStep("model", False, str(e), seconds=time.monotonic() - started))
            self.skip_rest("no tiny model")
            return self.report()
        self.add(
            SmokeStep(
                "model",
                True,
                f"{shape.layers} layers, hidden {shape.hidden}, {shape.heads} heads, vocab "
                f"{shape.vocab}: {self.model.weight_bytes / 2**20:.1f} MiB in {model_dir}",
                seconds=time.monotonic() - started,
            )
        )
        config, note = smoke_config(
            self.space, str(model_dir), runs_checkpoint=engine.runs_checkpoint
        )
        if not self._serve(engine, config, note):
            return self.report()
        self._low_fraction(engine, config)
        return self.report()

    def report(self) -> SmokeReport:
        return SmokeReport(steps=tuple(self.steps), folder=self.folder, model=self.model)

    # --- the served start ----------------------------------------------------------------------
    def _serve(self, engine: Engine, config: ServerConfig, note: str) -> bool:
        from autotune.server import find_free_port

        spec = engine.spec
        port = find_free_port(spec.host, preferred=spec.port)
        try:
            launch = engine.build_launch(config, port=port, workload=SMOKE_WORKLOAD)
        except AutotuneError as e:
            self.add(SmokeStep("start", False, f"no launch for {_describe(config)}: {e}"))
            self.skip_rest("the server could not be launched")
            return False
        what = f"{_describe(config)}" + (f" ({note})" if note else "")
        with _Server(engine, launch, self.folder / "start.log") as server:
            startup = server.startup
            if startup is None:
                self.add(SmokeStep("start", False, f"{what}: {server.launch_error}"))
                self.skip_rest("the server could not be launched")
                return False
            if not startup.ready:
                self.add(
                    SmokeStep(
                        "start",
                        False,
                        f"{what}: {startup.status} ({startup.category}): {startup.detail}; "
                        f"log: {server.log_path}",
                        evidence=startup.failure_line,
                        seconds=startup.startup_s,
                    )
                )
            else:
                self.add(
                    SmokeStep(
                        "start",
                        True,
                        f"{what}: ready in {startup.startup_s:.1f} s",
                        evidence=server.ready_line,
                        seconds=startup.startup_s,
                    )
                )
                self._benchmark(engine, launch, config)
        stop = server.stop_step("stop")
        self.add(stop)
        if not startup.ready:
            self.skip_rest("the server did not start")
            return False
        return bool(stop.passed)

    def _benchmark(self, engine: Engine, launch: LaunchSpec, config: ServerConfig) -> None:
        from autotune.bench import BenchmarkClient, ClientOptions, measure_sync

        started = time.monotonic()
        options = ClientOptions.from_timeouts(
            engine.spec.timeouts, headers=launch.auth_headers, server_api=engine.server_api()
        )
        try:
            measurement = measure_sync(BenchmarkClient(launch.url, options), SMOKE_WORKLOAD)
        except AutotuneError as e:
            self.add(SmokeStep("benchmark", False, str(e), seconds=time.monotonic() - started))
            return
        med = measurement.medians
        figures = {
            k: med.get(k)
            for k in (
                "output_tok_s",
                "accept_length",
                "accept_rate",
                "ttft_median_ms",
                "tpot_median_ms",
            )
        }
        failed = int(sum(r.failed for r in measurement.results))
        completed = int(sum(r.completed for r in measurement.results))
        accept = figures.get("accept_length")
        ok = completed > 0 and failed == 0 and (not config.speculative or accept is not None)
        parts = [f"{completed} requests, {failed} failed", f"{_num(figures['output_tok_s'])} tok/s"]
        if config.speculative:
            source = ",".join(measurement.acceptance_sources) or "none"
            parts.append(f"accept length {_num(accept, '.2f')} (from {source})")
        self.add(
            SmokeStep(
                "benchmark",
                ok,
                ", ".join(parts),
                seconds=time.monotonic() - started,
                figures=figures,
            )
        )

    # --- the start that must fail --------------------------------------------------------------
    def _low_fraction(self, engine: Engine, served: ServerConfig) -> None:
        from autotune.server import find_free_port

        weights = self.model.weight_bytes if self.model is not None else 40 * 2**20
        total = _gpu_total_bytes() or 80 * 2**30
        # a static share well under the weights: the pool (share x memory - weights) is empty
        fraction = max(1e-4, round(weights / total / 4, 6))
        config = served.replace(mem_fraction_static=fraction)
        port = find_free_port(engine.spec.host, preferred=engine.spec.port)
        try:
            launch = engine.build_launch(config, port=port, workload=SMOKE_WORKLOAD)
        except AutotuneError as e:
            self.add(SmokeStep("low fraction", False, f"no launch at fraction {fraction}: {e}"))
            return
        with _Server(engine, launch, self.folder / "low-fraction.log") as server:
            startup = server.startup
        if startup is None:
            self.add(
                SmokeStep("low fraction", False, f"fraction {fraction}: {server.launch_error}")
            )
            return
        stop = server.stop_step("low fraction stop")
        if startup.ready:
            passed, detail = (
                False,
                (
                    f"fraction {fraction} served: no KV-pool failure to read (ready in "
                    f"{startup.startup_s:.1f} s)"
                ),
            )
        elif startup.category == "oom_kv_pool":
            passed, detail = (
                True,
                (f"fraction {fraction}: read as oom_kv_pool after {startup.startup_s:.1f} s"),
            )
        else:
            passed, detail = (
                False,
                (
                    f"fraction {fraction}: read as {startup.category or startup.status}, not "
                    f"oom_kv_pool; log: {server.log_path}"
                ),
            )
        if not stop.passed:
            passed, detail = False, f"{detail}; {stop.detail}"
        self.add(
            SmokeStep(
                "low fraction",
                passed,
                detail,
                evidence=startup.failure_line,
                seconds=startup.startup_s,
            )
        )


class _Server:
    """One server of the smoke run: launched on enter, its start-up awaited; stopped on exit."""

    def __init__(self, engine: Engine, launch: LaunchSpec, log_path: Path) -> None:
        self.engine = engine
        self.launch = launch
        self.log_path = log_path
        self.proc: ServerProcess | None = None
        self.ready_line: str | None = None
        self.launch_error: str | None = None
        self.startup: StartupResult | None = None
        self._stop_detail: tuple[bool, str, float] | None = None

    def __enter__(self) -> _Server:
        from autotune.crashes import LiveClassifier
        from autotune.server import GpuMonitor, ServerProcess, wait_for_startup

        timeouts = self.engine.spec.timeouts
        self.gpus = GpuMonitor()
        self.baseline = self.gpus.snapshot() if self.gpus.available() else None
        try:
            self.proc = ServerProcess.launch(
                self.launch,
                log_path=self.log_path,
                term_timeout_s=timeouts.stop_s,
                kill_timeout_s=max(5.0, timeouts.stop_s / 2),
            )
        except AutotuneError as e:
            self.launch_error = str(e)
            return self
        try:
            self.startup = wait_for_startup(
                self.proc,
                classifier=LiveClassifier(self.engine.crash_rules()),
                readiness=self.engine.readiness(),
                url=self.launch.url,
                timeout_s=timeouts.startup_s,
                api_key=self.launch.api_key,
            )
        except BaseException:
            self._stop()
            raise
        if self.startup is not None and self.startup.ready:
            self.ready_line = _last_matching(self.log_path, self.engine.readiness().ready_lines)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        from autotune.server import wait_port_released

        if self.proc is None or self._stop_detail is not None:
            return
        started = time.monotonic()
        timeouts = self.engine.spec.timeouts
        outcome = self.proc.stop()
        problems: list[str] = []
        if outcome.survivors:
            problems.append("processes survived SIGKILL: " + ", ".join(map(str, outcome.survivors)))
        if self.proc.port is not None and not wait_port_released(
            self.engine.spec.host, self.proc.port, timeouts.stop_s
        ):
            problems.append(f"port {self.proc.port} still in use")
        gpu_note = "GPU check skipped: " + (self.gpus.reason or "no GPU")
        if self.baseline is not None:
            released = self.gpus.wait_released(
                self.proc.tree_pids() | set(outcome.pids), self.baseline, timeouts.gpu_release_s
            )
            if released.released:
                gpu_note = (
                    f"GPU memory back to its level before the start in {released.waited_s:.1f} s"
                )
            else:
                problems.append(f"GPU memory not released: {released.detail}")
        how = "SIGKILL" if outcome.forced else "SIGTERM"
        detail = f"stopped with {how}; {gpu_note}"
        if problems:
            detail = "; ".join(problems)
        self._stop_detail = (not problems, detail, time.monotonic() - started)

    def stop_step(self, name: str) -> SmokeStep:
        self._stop()
        assert self._stop_detail is not None
        passed, detail, seconds = self._stop_detail
        return SmokeStep(name, passed, detail, seconds=seconds)


def _last_matching(path: Path, needles: tuple[str, ...]) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = [line for line in text.splitlines() if any(n in line for n in needles)]
    return found[-1].strip() if found else None


def _gpu_total_bytes() -> int | None:
    from autotune.server import GpuMonitor

    gpus = GpuMonitor()
    if not gpus.available():
        return None
    totals = [u.total_mib for u in gpus.snapshot() if getattr(u, "total_mib", None)]
    return int(min(totals) * 2**20) if totals else None


def _describe(config: ServerConfig) -> str:
    shown = {
        k: v
        for k, v in config.to_params().items()
        if k not in ("tp_size", "allreduce") and v is not False
    }
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "no speculation"


def _num(value: float | None, fmt: str = ".0f") -> str:
    return "-" if value is None else format(value, fmt)


def run_smoke(
    space: SearchSpace,
    folder: Path,
    *,
    model: TinyModelSpec | None = None,
    on_step: Callable[[SmokeStep], None] = lambda step: None,
) -> SmokeReport:
    """Run the smoke steps of ``space`` with files in ``folder``; ``on_step`` sees each step as it
    ends. A failed step never raises: it is in the report, and the steps after it are skipped."""
    return _Smoke(space, folder, model, on_step).run()
