"""Issue 42: a study's liveness is a fact (a heartbeat per worker), not a guess.

`study status` of a study whose tuner was killed -9 says it is dead, and since when; while its
tuner runs it says running with the tuner's pid and host; during a confirmation it says
confirming and the round. `study resume` (and `study confirm`) of a study whose tuner is alive
refuses, launching nothing, unless `--join` says a second worker is meant."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable

import optuna

from ._lab import CONFIGS, StudyLab, no_traceback

TUNER = "autotune:tuner"
PROCESS = "autotune:process"


def _status(lab: StudyLab, name: str) -> list[str]:
    run = lab.cli("study", "status", "--study-name", name, servers_gone=False)
    assert run.rc == 0, run.show()
    no_traceback(run)
    return run.out.splitlines()


def _running_trial(lab: StudyLab, name: str, attr: str = TUNER) -> object:
    for t in lab.trials(name):
        if t.state.name == "RUNNING" and attr in t.system_attrs:
            return t
    return None


def test_status_of_a_killed_tuner_says_dead_and_since_when(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("SIGKILL of the tuner, then `study status`")
    name = "live-dead"
    space = lab.space(name, faults=["slow_start:200"], configs=CONFIGS[:2])
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3", "--no-informed")
    lab.wait_server()
    lab.wait_for("the tuner's server record", lambda: _running_trial(lab, name, PROCESS), 60)

    lines = _status(lab, name)
    host = socket.gethostname()
    assert any(line.strip().startswith(f"running: pid {tuner.pid} on {host}") for line in lines), (
        lines
    )
    assert ", 1 running," in lines[0], lines

    tuner.kill()
    tuner.wait(timeout=30)
    lines = _status(lab, name)
    assert any(line.strip().startswith("dead since ") for line in lines), lines
    assert f"pid {tuner.pid} on {host}" in "\n".join(lines), lines
    assert ", 0 running, 1 left by a dead tuner," in lines[0], lines  # not "1 running"

    run = lab.cli("study", "resume", "--study-name", name)  # the dead run is taken over
    assert run.rc == 0, run.show()
    lines = _status(lab, name)
    assert any(line.strip().startswith("not running: its last tuner ended") for line in lines)


def test_resume_of_a_live_study_refuses_without_join(
    lab: StudyLab, bad_input_tried: Callable[[str], None]
) -> None:
    bad_input_tried("`study resume` of a study whose tuner is still running")
    bad_input_tried("`study confirm` of a study whose tuner is still running")
    name = "live-busy"
    space = lab.space(name, faults=["slow_start:100"], configs=CONFIGS[:2])
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "2", "--no-informed")
    lab.wait_server()
    lab.wait_for("the tuner's trial", lambda: _running_trial(lab, name), 60)

    for command in ("resume", "confirm"):
        refused = lab.cli("study", command, "--study-name", name, servers_gone=False)
        assert refused.rc == 1, refused.show()
        no_traceback(refused)
        assert "--join" in refused.err, refused.show()
        assert str(tuner.pid) in refused.err, refused.show()
        # nothing launched and nothing asked for: every trial and server is the live tuner's
        assert all(p.ppid() == tuner.pid for p in lab.servers()), lab.servers()
        owners = {(t.system_attrs.get(TUNER) or {}).get("pid") for t in lab.trials(name)}
        assert owners <= {tuner.pid, None}, owners
    assert tuner.poll() is None

    done = lab.finish(tuner, timeout=240)
    assert done.rc == 0, done.show()
    assert "2 of 2 trials finished" in done.out, done.show()


def test_resume_with_join_runs_a_second_worker(lab: StudyLab) -> None:
    name = "live-join"
    space = lab.space(name, faults=["slow_start:10"], configs=CONFIGS)
    common = ("--sampler", "random", "--no-informed")
    first = lab.spawn("study", "start", "--space", str(space), "--n-trials", "4", *common)
    lab.wait_server()
    lab.wait_for("the first worker's trial", lambda: _running_trial(lab, name), 60)
    second = lab.spawn("study", "resume", "--study-name", name, "--join", *common[:2])
    for proc in (first, second):
        run = lab.finish(proc, timeout=240)
        assert run.rc == 0, run.show()
        no_traceback(run)
    tuners = {(t.system_attrs.get(TUNER) or {}).get("pid") for t in lab.finished(name)}
    assert {first.pid, second.pid} <= tuners
    assert len(lab.finished(name)) == 4


def test_status_during_a_confirmation_says_confirming_and_the_round(lab: StudyLab) -> None:
    name = "live-confirm"
    confirm = {"candidates": 1, "min_rounds": 2, "max_rounds": 3}
    space = lab.space(name, faults=["slow_start:20"], configs=CONFIGS[:1], confirm=confirm)
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "2", "--no-informed")
    lab.wait_server()

    def confirming() -> list[str] | None:
        lines = _status(lab, name)
        return lines if any(line.strip().startswith("confirming ") for line in lines) else None

    lines = lab.wait_for("the confirmation", confirming, 180)
    (line,) = [line.strip() for line in lines if line.strip().startswith("confirming ")]
    assert line.startswith("confirming round "), line
    assert " of 3: " in line and f"pid {tuner.pid}" in line, line
    tuner.send_signal(signal.SIGINT)
    assert lab.finish(tuner, timeout=120).rc == 130


def test_resume_keeps_the_sampler_it_was_started_with(lab: StudyLab) -> None:
    """`study start --sampler random`, Ctrl-C, `study resume` without --sampler: random."""
    name = "live-sampler"
    space = lab.space(name, faults=["slow_start:20"], baseline=False, configs=CONFIGS[:1])
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "2",
                      "--sampler", "random", "--no-informed")  # fmt: skip
    lab.wait_server()
    tuner.send_signal(signal.SIGINT)
    assert lab.finish(tuner, timeout=60).rc == 130

    clean = lab.space(name, baseline=False, configs=CONFIGS[:1], file="clean.yaml")
    run = lab.cli("study", "resume", "--study-name", name, "--space", str(clean))
    assert run.rc == 0, run.show()
    logs = sorted((lab.studies / f"{name}-logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
    samplers = [line for line in logs[-1].read_text().splitlines() if "sampler: " in line]
    assert samplers and "RandomSampler" in samplers[-1], samplers


def test_confirm_settings_are_kept_by_a_later_confirm(lab: StudyLab) -> None:
    """`study confirm --max-rounds 2`, interrupted; `study confirm` again goes on with 2."""
    name = "live-csettings"
    space = lab.space(name, configs=CONFIGS[:1], confirm={"candidates": 1, "min_rounds": 2,
                                                         "max_rounds": 6})  # fmt: skip
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "2", "--no-confirm",
                  "--no-informed")  # fmt: skip
    assert run.rc == 0, run.show()
    run = lab.cli("study", "confirm", "--study-name", name, "--max-rounds", "2")
    assert run.rc == 0, run.show()
    run = lab.cli("study", "confirm", "--study-name", name)
    assert run.rc == 0, run.show()
    study = optuna.load_study(study_name=name, storage=lab.storage(lab.sqlite_url(name)))
    assert study.user_attrs["autotune:confirmation"]["spec"]["max_rounds"] == 2
