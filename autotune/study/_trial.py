"""One trial: judge, launch, watch the start-up, benchmark, stop, record.

The server is always stopped (TERM, then KILL, the whole process tree) before a trial returns,
whatever happens in between: a crash line, a time-out, a failed benchmark, Ctrl-C. A start-up
crash ends the wait at the line that decides it, so it costs seconds, not the start-up timeout.

With a load mix (``objective.loads``) the benchmark runs the workload once per load point, one
after the other on the same server, each point with its own repeats and early stop
(:attr:`TrialHooks.early_stop_at`); the record keeps each point's figures and the objective is
their weighted mean (:meth:`ObjectiveSpec.weighted`).

A stop asked for by a signal (:attr:`TrialHooks.cancelled`) ends the start-up wait or the
benchmark at once; the server is stopped and :class:`~autotune._errors.Cancelled` raised for the
caller to record the trial as interrupted. The stop itself is never cut short by a signal;
:attr:`TrialHooks.urgent` (a second one) makes it SIGKILL at once.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from autotune._errors import BenchmarkError, BenchmarkTimeout, Cancelled
from autotune._knobs import ServerConfig
from autotune._redact import redact_file, redact_values
from autotune.bench import (
    BenchmarkClient,
    ClientOptions,
    Measurement,
    measure_sync,
)
from autotune.crashes import LiveClassifier, classify_file
from autotune.engines import Engine, LaunchSpec
from autotune.server import (
    GpuMonitor,
    GpuUsage,
    ProcessIdentity,
    ServerProcess,
    cap_log,
    find_free_port,
    identity_of,
    new_token,
    wait_for_startup,
    wait_port_released,
)
from autotune.space import ObjectiveSpec, SearchSpace
from autotune.study._evaluate import (
    TrialContext,
    TrialEvaluator,
    TrialFiles,
    TrialHooks,
    refusal,
)
from autotune.study._feasibility import Feasibility
from autotune.study._hooks import pause_at
from autotune.study._record import LOAD_FIGURES, METRIC_ATTRS, Outcome, TrialRecord

log = logging.getLogger("autotune.study")

#: Launches of one trial when another program takes its port in the meantime.
PORT_ATTEMPTS = 3


class TrialRunner:
    """Runs trials of one space on one engine. See the module docstring."""

    def __init__(
        self,
        space: SearchSpace,
        engine: Engine,
        feasibility: Feasibility,
    ) -> None:
        self.space = space
        self.engine = engine
        self.feasibility = feasibility
        self._gpus: GpuMonitor | None = None

    @property
    def objective(self) -> ObjectiveSpec:
        return self.space.objective

    def gpus(self) -> GpuMonitor:
        if self._gpus is None:
            self._gpus = GpuMonitor()
            if not self._gpus.available():
                log.info("GPU release check skipped: %s", self._gpus.reason)
        return self._gpus

    def run(
        self,
        config: ServerConfig,
        params: dict[str, Any] | None,
        *,
        role: str,
        files: TrialFiles,
        hooks: TrialHooks,
    ) -> TrialRecord:
        """Run one trial of ``config`` (``params``: the searched knobs; None for the baseline):
        refused before launch (:func:`~autotune.study._evaluate.refusal`), else launched."""
        refused = refusal(self.feasibility, config, params, role=role)
        if refused is not None:
            return refused
        return self.launch(config, role=role, files=files, hooks=hooks)

    def launch(
        self, config: ServerConfig, *, role: str, files: TrialFiles, hooks: TrialHooks
    ) -> TrialRecord:
        """Launch ``config`` (judged runnable already), watch the start-up, benchmark, stop."""
        spec = self.engine.spec
        preferred: int | None = spec.port
        record = TrialRecord(outcome=Outcome.OK, role=role)
        for _ in range(PORT_ATTEMPTS):
            _check_cancelled(hooks)
            port = find_free_port(spec.host, preferred=preferred)
            record = self._launch_once(config, port, role, files, hooks)
            if record.outcome is not Outcome.PORT_IN_USE:
                break
            # another program took the port between the check and the server's bind: that
            # says nothing about the configuration, so launch again on another port
            log.warning("port %d was taken before the server bound it; launching again", port)
            preferred = None
        if record.outcome is not Outcome.OK:
            _check_log_disk(files)
        return record

    def _launch_once(
        self, config: ServerConfig, port: int, role: str, files: TrialFiles, hooks: TrialHooks
    ) -> TrialRecord:
        spec = self.engine.spec
        launch = self.engine.build_launch(config, port=port, workload=self.space.workload)
        record = TrialRecord(outcome=Outcome.OK, role=role, command=launch.display())
        record.sglang_command = self.engine.reference_command(
            config, port=spec.port, workload=self.space.workload
        )
        files.folder.mkdir(parents=True, exist_ok=True)
        files.server_log = files.folder / "server.log"
        gpus = self.gpus()
        baseline = gpus.snapshot() if gpus.available() else None
        hooks.on_phase("launch")
        timeouts = spec.timeouts
        proc: ServerProcess | None = None
        try:
            with hooks.launching():
                token = new_token()
                hooks.before_launch(ProcessIdentity.pending(token, launch.port).to_dict())
                proc = ServerProcess.launch(
                    launch,
                    log_path=files.server_log,
                    term_timeout_s=timeouts.stop_s,
                    kill_timeout_s=max(5.0, timeouts.stop_s / 2),
                    token=token,
                )
                pause_at("launched")  # test hook: a kill here leaves only the pending record
                hooks.on_launch(identity_of(proc).to_dict())
            _check_cancelled(hooks)
            self._run_started(proc, launch, record, files, hooks)
            self.feasibility.memory.record(config, record, files.server_log)
        finally:
            if proc is not None:
                self._stop(proc, record, hooks, baseline)
            _redact_record(record, files, launch.secrets())
        return record

    def _stop(
        self,
        proc: ServerProcess,
        record: TrialRecord,
        hooks: TrialHooks,
        baseline: list[GpuUsage] | None,
    ) -> None:
        """Stop the server's whole tree; wait for its port and GPU memory to be free again."""
        timeouts = self.engine.spec.timeouts
        hooks.on_phase("stop")
        outcome = proc.stop(urgent=hooks.urgent)
        record.extra["stop_forced"] = outcome.forced
        if outcome.survivors:
            log.error(
                "server processes %s survived SIGKILL (stuck in the kernel?); stop them by hand",
                ", ".join(map(str, outcome.survivors)),
            )
        if proc.port is not None:
            wait_port_released(self.engine.spec.host, proc.port, timeouts.stop_s)
        if baseline is not None:
            gpus = self.gpus()
            released = gpus.wait_released(
                proc.tree_pids() | set(outcome.pids), baseline, timeouts.gpu_release_s
            )
            record.extra["gpu_released"] = released.released
            if not released.released:
                log.warning("GPU memory not released after %s: %s", proc.port, released.detail)

    def _run_started(
        self,
        proc: ServerProcess,
        launch: LaunchSpec,
        record: TrialRecord,
        files: TrialFiles,
        hooks: TrialHooks,
    ) -> None:
        timeouts = self.engine.spec.timeouts
        hooks.on_phase("startup")
        startup = wait_for_startup(
            proc,
            classifier=LiveClassifier(self.engine.crash_rules()),
            readiness=self.engine.readiness(),
            url=launch.url,
            timeout_s=timeouts.startup_s,
            api_key=launch.api_key,
            cancelled=hooks.cancelled,
        )
        if startup.status == "interrupted":
            raise Cancelled("stopped during the server's start-up")
        record.startup_s = startup.startup_s
        if not startup.ready:
            record.outcome = (
                Outcome.TIMEOUT
                if startup.status == "timeout"
                else Outcome.of_crash(startup.category)
            )
            record.failure_line = startup.failure_line
            if files.server_log is not None and record.outcome is not Outcome.TIMEOUT:
                record.advice = classify_file(
                    files.server_log,
                    self.engine.crash_rules(),
                    exit_code=startup.exit_code,
                    alive=startup.exit_code is None,
                ).advice
            elif record.outcome is Outcome.TIMEOUT:
                record.advice = (
                    f"the server did not become ready within {timeouts.startup_s:.0f} s; "
                    "raise engine.timeouts.startup_s if it is merely slow"
                )
            return
        hooks.on_phase("benchmark")
        # a stream silent for longer than one request may take has failed: end it then
        silence = min(ClientOptions.read_timeout_s, timeouts.request_s)
        options = ClientOptions.from_timeouts(
            timeouts,
            read_timeout_s=silence,
            headers=launch.auth_headers,
            server_api=self.engine.server_api(),
            limits=self.space.objective.slo,
            time_scale=self.engine.serve_time_scale(),
        )
        client = BenchmarkClient(launch.url, options)
        started = time.monotonic()
        try:
            measurements = self._measure(client, hooks)
        except BenchmarkTimeout as e:
            record.benchmark_s = time.monotonic() - started
            self._benchmark_failed(proc, record, files, str(e), timed_out=True)
            return
        except BenchmarkError as e:
            record.benchmark_s = time.monotonic() - started
            self._benchmark_failed(proc, record, files, str(e))
            return
        record.benchmark_s = time.monotonic() - started
        if self.objective.loads:
            self._record_loads(record, measurements, files)
        else:
            self._record_measurement(record, measurements[""], files)
        if proc.poll() is not None:
            # the server died during the benchmark: keep the figures, record the cause
            self._benchmark_failed(proc, record, files, "the server exited during the benchmark")

    def _measure(self, client: BenchmarkClient, hooks: TrialHooks) -> dict[str, Measurement]:
        """The workload once at its own load (keyed ``""``), or once per load point of the mix
        (keyed by label), on the same server."""
        points = self.objective.loads
        if not points:
            measurement = measure_sync(
                client, self.space.workload, early_stop=hooks.early_stop, cancelled=hooks.cancelled
            )
            return {"": measurement}
        out: dict[str, Measurement] = {}
        for point in points:
            hooks.on_phase(f"benchmark {point.label}")
            stop = hooks.early_stop_at(point.label) if hooks.early_stop_at else None
            out[point.label] = measure_sync(
                client,
                point.workload(self.space.workload),
                early_stop=stop,
                cancelled=hooks.cancelled,
            )
        return out

    def _benchmark_failed(
        self,
        proc: ServerProcess,
        record: TrialRecord,
        files: TrialFiles,
        detail: str,
        *,
        timed_out: bool = False,
    ) -> None:
        code = proc.poll()
        rules = self.engine.crash_rules()
        verdict = (
            classify_file(files.server_log, rules, exit_code=code, alive=code is None)
            if files.server_log
            else None
        )
        if verdict is not None and verdict.is_crash:
            record.outcome = Outcome.of_crash(verdict.category)
            record.failure_line = verdict.evidence
            record.advice = verdict.advice
        elif timed_out:
            record.outcome = Outcome.TIMEOUT
            record.failure_line = detail
        else:
            record.outcome = Outcome.OTHER_CRASH
            record.failure_line = detail
        record.value = record.values = None
        record.benchmark_error = detail

    def _record_measurement(
        self, record: TrialRecord, measurement: Measurement, files: TrialFiles
    ) -> None:
        med = measurement.medians
        obj = self.objective
        record.value = measurement.score(obj.metric, kind=obj.score, mad_k=obj.mad_k)
        if obj.multi:
            record.values = tuple(
                measurement.score(m, kind=obj.score, mad_k=obj.mad_k) for m in obj.metrics
            )
        for name in METRIC_ATTRS:
            record.metrics[name] = med.get(name)
        record.extra.update(
            {
                "failed_requests": int(sum(r.failed for r in measurement.results)),
                "repeats": len(measurement.results),
                "stopped_early": measurement.stopped_early,
                "noisy": measurement.noisy,
                "spread": _round(measurement.mads.get(obj.metric)),
                "acceptance_source": ",".join(measurement.acceptance_sources) or None,
            }
        )
        files.results = files.folder / "benchmark.json"
        files.results.write_text(
            json.dumps(measurement.to_dict(requests=True), indent=1, default=str)
        )

    def _record_loads(
        self, record: TrialRecord, measurements: Mapping[str, Measurement], files: TrialFiles
    ) -> None:
        """Every load point's figures, the weighted objective and the weighted metrics."""
        obj = self.objective
        for label, measurement in measurements.items():
            figures: dict[str, float | None] = {
                name: _round(measurement.medians.get(name)) for name in LOAD_FIGURES[1:]
            }
            figures["value"] = measurement.score(obj.metric, kind=obj.score, mad_k=obj.mad_k)
            record.loads[label] = {name: figures.get(name) for name in LOAD_FIGURES}
        record.value = obj.weighted({k: v["value"] for k, v in record.loads.items()})
        for name in METRIC_ATTRS:
            record.metrics[name] = obj.weighted(
                {k: m.medians.get(name) for k, m in measurements.items()}
            )
        results = [r for m in measurements.values() for r in m.results]

        def mix(name: str) -> float | None:
            return _round(obj.weighted({k: v[name] for k, v in record.loads.items()}))

        record.extra.update(
            {
                "total_tok_s": mix("total_tok_s"),
                "tpot_p99_ms": mix("tpot_p99_ms"),
                "failed_requests": int(sum(r.failed for r in results)),
                "repeats": len(results),
                "stopped_early": any(m.stopped_early for m in measurements.values()),
                "noisy": any(m.noisy for m in measurements.values()),
                "acceptance_source": ",".join(
                    dict.fromkeys(s for m in measurements.values() for s in m.acceptance_sources)
                )
                or None,
            }
        )
        files.results = files.folder / "benchmark.json"
        files.results.write_text(
            json.dumps(
                {k: m.to_dict(requests=True) for k, m in measurements.items()},
                indent=1,
                default=str,
            )
        )


def _check_cancelled(hooks: TrialHooks) -> None:
    if hooks.cancelled():
        raise Cancelled("stopped before the trial could go on")


#: Free bytes under which the disk of a trial's log counts as full.
FULL_DISK_BYTES = 64 * 1024


def _check_log_disk(files: TrialFiles) -> None:
    """A server whose log met a full disk logs nothing more: its trial would read as a start-up
    time-out or an unexplained exit. Say what happened instead (the study stops on it and the
    trial runs again on resume).

    Raises:
        OSError: ENOSPC, naming the server log, when its disk is full.
    """
    import errno
    import shutil

    try:
        free = shutil.disk_usage(files.folder).free
    except OSError:
        return
    if free < FULL_DISK_BYTES:
        raise OSError(
            errno.ENOSPC, os.strerror(errno.ENOSPC), str(files.server_log or files.folder)
        )


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


def _redact_record(record: TrialRecord, files: TrialFiles, secrets: set[str]) -> None:
    """No secret of the launch in what is kept: the server's log (an artifact) and the lines
    quoted from it); a log that flooded is kept capped, its head and tail (:func:`cap_log`)."""
    if files.server_log is not None:
        cap_log(files.server_log)
        redact_file(files.server_log, secrets)
    if record.failure_line:
        record.failure_line = redact_values(record.failure_line, secrets)
    if record.advice:
        record.advice = redact_values(record.advice, secrets)
    if record.benchmark_error:
        record.benchmark_error = redact_values(record.benchmark_error, secrets)


class ServerEvaluator(TrialEvaluator):
    """The real trial: launch the server, follow its log, benchmark it, stop it."""

    def __init__(self, trials: TrialRunner) -> None:
        self.trials = trials

    def gpu_seconds(self, record: TrialRecord, wall_s: float, gpus: int) -> float:
        """The GPUs held for ``wall_s``, the start-up and the serving counted as long as on the
        box the engine stands for (the simulator starts its servers, and may serve, faster than
        the box it models)."""
        startup = min(wall_s, record.startup_s or 0.0)
        engine = self.trials.engine
        serving = wall_s - startup
        return (startup / engine.startup_time_scale() + serving / engine.serve_time_scale()) * gpus

    def evaluate(self, config: ServerConfig, context: TrialContext) -> TrialRecord:
        return self.trials.launch(
            config, role=context.role, files=context.files, hooks=context.hooks
        )
