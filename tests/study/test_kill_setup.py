"""Records written in an order a kill at any instant survives (issue 10, items 3, 1 and 7).

The tuner is stopped with SIGKILL at chosen instants of ``study start`` and of ``study resume``
(the test hook ``AUTOTUNE_TEST_PAUSE_AT=<phase>`` of autotune.study._setup makes it print a line
and sleep there), then the study is continued: nothing is lost and nothing runs twice. Also: the
re-run of an interrupted baseline runs first; a live worker stops the server of a worker killed
next to it at once; two simultaneous starts give one study and one clear refusal.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from ._lab import CONFIGS, StudyLab, no_traceback
from ._scenarios import PROCESS, TUNER, _running

PAUSE_ENV = "AUTOTUNE_TEST_PAUSE_AT"
COMPLETE = "autotune:setup_complete"


def _spawn_paused(lab: StudyLab, phase: str, *args: str, log: str) -> subprocess.Popen[bytes]:
    """``autotune ARGS`` stopped by SIGKILL once it reports pausing at ``phase``."""
    lab.env[PAUSE_ENV] = phase
    try:
        proc = lab.spawn(*args, log=log)
    finally:
        lab.env.pop(PAUSE_ENV)
    err = Path(lab.root / f"{log}.err")
    lab.wait_for(
        f"the tuner to pause at {phase}",
        lambda: f"autotune-test: paused at {phase}" in err.read_text() or proc.poll() is not None,
        90,
    )
    assert proc.poll() is None, err.read_text()
    proc.kill()
    proc.wait(timeout=30)
    return proc


def _check_study(lab: StudyLab, name: str, n: int) -> list:
    import optuna

    trials = lab.trials(name)
    finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == n, [(t.number, t.state.name, t.user_attrs) for t in trials]
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    roles = Counter(t.user_attrs.get("role") for t in finished)
    assert roles["baseline"] == 1 and roles["enqueued"] == 2, roles
    assert sorted(str(t.params) for t in finished if t.user_attrs["role"] == "enqueued") == sorted(
        str(c) for c in CONFIGS[:2]
    )
    study = optuna.load_study(study_name=name, storage=lab.storage(lab.sqlite_url(name)))
    assert study.user_attrs.get(COMPLETE) is True
    return trials


@pytest.mark.parametrize(
    ("phase", "then"),
    [
        ("created", "start"),
        ("space", "resume"),
        ("target", "start"),
        ("baseline", "resume"),
        ("queued", "start"),
    ],
)
def test_kill9_during_start_setup_then_continue(
    lab: StudyLab, fault_tried: Callable[[str], None], phase: str, then: str
) -> None:
    fault_tried(f"SIGKILL of `study start` at set-up phase {phase}")
    name = f"setup-{phase}"
    space = lab.space(name, configs=CONFIGS[:2])
    start = ("study", "start", "--space", str(space), "--n-trials", "3", "--no-informed")
    _spawn_paused(lab, phase, *start, log="killed")
    lab.check_no_servers("after the tuner was killed during set-up")
    if then == "start":
        run = lab.cli(*start)
    else:
        run = lab.cli("study", "resume", "--study-name", name, "--n-trials", "3")
    assert run.rc == 0, run.show()
    no_traceback(run)
    assert "half-created" in run.err, run.show()
    assert "3 of 3 trials finished" in run.out, run.show()
    trials = _check_study(lab, name, 3)
    assert all(t.state.name != "FAIL" for t in trials)


def test_resume_of_a_study_killed_before_its_space_was_stored(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("SIGKILL of `study start` right after the study row was created")
    space = lab.space("bare", configs=CONFIGS[:2])
    start = ("study", "start", "--space", str(space), "--n-trials", "3", "--no-informed")
    _spawn_paused(lab, "created", *start, log="killed")
    refused = lab.cli("study", "resume", "--study-name", "bare")
    assert refused.rc != 0, refused.show()
    no_traceback(refused)
    assert "was not completely created" in refused.err, refused.show()
    assert "study start" in refused.err, refused.show()
    run = lab.cli(*start)
    assert run.rc == 0, run.show()
    _check_study(lab, "bare", 3)


def test_baseline_killed_then_resume_killed_after_requeue(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    """A kill during the baseline, then a kill of the resuming tuner right after it queued the
    re-run (before failing the stale trial): one re-run of the baseline, run before the other
    queued trials, which then carry a speed-up."""
    fault_tried("SIGKILL of the tuner during the baseline")
    fault_tried("SIGKILL of `study resume` between queueing the re-run and failing the trial")
    name = "basekill"
    space = lab.space(name, faults=["slow_start:20"], configs=CONFIGS[:2])
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3", "--no-informed")
    lab.wait_server()
    lab.wait_for("the baseline's process record", lambda: _running(lab, name, None, PROCESS), 60)
    tuner.kill()
    tuner.wait(timeout=30)
    (stale,) = [t for t in lab.trials(name) if t.state.name == "RUNNING"]
    assert stale.user_attrs["role"] == "baseline"

    _spawn_paused(lab, "requeued", "study", "resume", "--study-name", name, log="resume1")
    trials = {t.number: t for t in lab.trials(name)}
    assert trials[stale.number].state.name == "RUNNING"  # killed before it was failed
    reruns = [t for t in trials.values() if t.user_attrs.get("autotune:rerun_of") == stale.number]
    assert len(reruns) == 1 and reruns[0].state.name == "WAITING"
    lab.check_no_servers("after the resuming tuner was killed")

    run = lab.cli("study", "resume", "--study-name", name)
    assert run.rc == 0, run.show()
    no_traceback(run)
    assert "3 of 3 trials finished" in run.out, run.show()
    trials = {t.number: t for t in lab.trials(name)}
    assert trials[stale.number].state.name == "FAIL"
    assert trials[stale.number].user_attrs["outcome"] == "interrupted"
    reruns = [t for t in trials.values() if t.user_attrs.get("autotune:rerun_of") == stale.number]
    assert len(reruns) == 1, reruns  # not queued twice
    (base,) = reruns
    assert base.state.name == "COMPLETE" and base.user_attrs["role"] == "baseline"
    enqueued = [t for t in trials.values() if t.user_attrs.get("role") == "enqueued"]
    assert len(enqueued) == 2
    for t in enqueued:
        assert t.datetime_start > base.datetime_complete, "the baseline re-run should run first"
        if t.state.name == "COMPLETE":
            assert "speedup" in t.user_attrs, t.user_attrs
    _check_study(lab, name, 3)


def _listening(pid: int) -> bool:
    """Whether process ``pid`` or one of its descendants listens on a TCP port."""
    try:
        proc = psutil.Process(pid)
        for p in (proc, *proc.children(recursive=True)):
            if any(c.status == psutil.CONN_LISTEN for c in p.net_connections(kind="tcp")):
                return True
    except psutil.Error:
        return False
    return False


def test_two_workers_one_killed_the_other_stops_its_server(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    """kill -9 of one of two workers on one SQLite study while its server runs: the other
    worker stops that server within seconds (long before the study ends), runs the trial again
    and the study ends with exactly the target."""
    fault_tried("SIGKILL of one of two workers while its server runs")
    name, n = "watch", 6
    space = lab.space(name, faults=["slow_start:10"], configs=CONFIGS[:2])
    common = ("--sampler", "random", "--no-informed")
    first = lab.spawn(
        "study", "start", "--space", str(space), "--n-trials", str(n), *common, log="first"
    )
    lab.wait_for("the first worker's trial", lambda: _running(lab, name, None, TUNER), 60)
    second = lab.spawn(
        "study", "resume", "--study-name", name, "--join", "--sampler", "random", log="second"
    )

    def first_serving() -> object:
        for t in lab.trials(name):
            tuner = t.system_attrs.get(TUNER) or {}
            mine = t.state.name == "RUNNING" and tuner.get("pid") == first.pid
            pid = int((t.system_attrs.get(PROCESS) or {}).get("pid", -1))
            # launched (not the pending record's pid -1), listening on its port (a server that
            # lost its port to the other worker's between the check and the bind dies on its own
            # and is launched again elsewhere) and not a start-up crash already gone
            if mine and pid > 0 and _listening(pid):
                return t
        return None

    def second_running() -> bool:
        return any(
            (t.system_attrs.get(TUNER) or {}).get("pid") == second.pid for t in lab.trials(name)
        )

    lab.wait_for("the second worker's first trial", second_running, 90)
    for _ in range(20):  # a server that crashed at start-up is gone before it is caught
        victim = lab.wait_for("a server of the first worker", first_serving, 90)
        try:
            server = psutil.Process(int(victim.system_attrs[PROCESS]["pid"]))
            break
        except psutil.NoSuchProcess:
            continue
    first.kill()
    first.wait(timeout=30)
    killed_at = time.monotonic()
    assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE

    def gone() -> bool:
        try:
            return not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return True

    lab.wait_for("the other worker to stop the dead worker's server", gone, 45)
    stopped_after = time.monotonic() - killed_at
    assert second.poll() is None, "the study should still run when the server is stopped"

    run = lab.finish(second, timeout=300)
    assert run.rc == 0, run.show()
    no_traceback(run)
    assert f"trial {victim.number} [" in run.err and "has been stopped" in run.err, run.show()
    lab.check_no_servers("after the remaining worker exited")
    trials = {t.number: t for t in lab.trials(name)}
    finished = [t for t in trials.values() if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == n, [(t.number, t.state.name) for t in trials.values()]
    assert not [t for t in trials.values() if t.state.name == "RUNNING"]
    assert trials[victim.number].state.name == "FAIL"
    assert trials[victim.number].user_attrs["outcome"] == "interrupted"
    reruns = [t for t in finished if t.user_attrs.get("autotune:rerun_of") == victim.number]
    assert len(reruns) == 1
    # the re-run stands in for the trial it repeats (the victim may be any of them: the
    # baseline, a space configuration or a sampler proposal, depending on the machine's pace)
    roles = Counter(
        trials[t.user_attrs["autotune:rerun_of"]].user_attrs["role"]
        if "autotune:rerun_of" in t.user_attrs
        else t.user_attrs["role"]
        for t in finished
    )
    assert roles["baseline"] == 1 and roles["enqueued"] == 2, roles
    assert roles["search"] == n - 3, roles
    print(f"dead worker's server stopped {stopped_after:.1f} s after the kill")


def test_two_simultaneous_starts_one_winner(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    for round_ in range(3):
        fault_tried("two simultaneous `study start` with one name")
        name = f"twin{round_}"
        space = lab.space(name, baseline=False, configs=CONFIGS[:1])
        args = ("study", "start", "--space", str(space), "--n-trials", "1", "--no-informed")
        procs = [lab.spawn(*args, log=f"{name}-{i}") for i in range(2)]
        runs = [lab.finish(p, timeout=180) for p in procs]
        for run in runs:
            no_traceback(run)
            assert "alembic" not in run.text, run.show()
        codes = sorted(run.rc for run in runs)
        assert codes[0] == 0 and codes[1] != 0, [r.show() for r in runs]
        (loser,) = [r for r in runs if r.rc != 0]
        assert f"study '{name}'" in loser.err and (
            "already exists" in loser.err or "at the same moment" in loser.err
        ), loser.show()
        assert len(lab.finished(name)) == 1


def test_kill9_between_a_launch_and_its_pid_record_then_resume(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    """Killed after its server started but before the server's pid was recorded, the tuner
    leaves the record it stored before the launch (the launch's token): ``study resume`` stops
    that server, then re-runs its trial."""
    fault_tried("SIGKILL of `study start` between a server's launch and its pid record")
    space = lab.space("launched", configs=CONFIGS[:2])
    start = ("study", "start", "--space", str(space), "--n-trials", "3", "--no-informed")
    _spawn_paused(lab, "launched", *start, log="killed")
    server = lab.wait_server()
    assert server.is_running()
    run = lab.cli("study", "resume", "--study-name", "launched", "--n-trials", "3")
    assert run.rc == 0, run.show()
    no_traceback(run)
    assert not server.is_running()
    assert "its server was still running and has been stopped" in run.err, run.show()
    _check_study(lab, "launched", 3)


def test_kill9_between_a_confirmation_launch_and_its_pid_record_then_confirm(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    """The same instant in a confirmation run: the next ``study confirm`` stops the server
    that the killed one left, before its own rounds."""
    fault_tried("SIGKILL of `study confirm` between a server's launch and its pid record")
    space = lab.space(
        "conf-launched",
        configs=CONFIGS[:2],
        confirm={"candidates": 2, "min_rounds": 2, "max_rounds": 3},
    )
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "3", "--no-confirm")
    assert run.rc == 0, run.show()
    _spawn_paused(lab, "launched", "study", "confirm", "--study-name", "conf-launched", log="c")
    server = lab.wait_server()
    assert server.is_running()
    again = lab.cli("study", "confirm", "--study-name", "conf-launched")
    assert again.rc == 0, again.show()
    no_traceback(again)
    assert not server.is_running()
