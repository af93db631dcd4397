"""SQLite under load: optuna-dashboard reading the study file while the tuner writes it, and two
workers sharing one study file."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import httpx

from autotune.engines import Timeouts
from autotune.study import study_paths
from autotune.study._claims import count_claims, recover_stale

from ._lab import CONFIGS, StudyLab, free_port, no_traceback
from ._scenarios import two_workers


def test_dashboard_reads_while_the_tuner_writes(lab: StudyLab) -> None:
    space = lab.space("watched", configs=CONFIGS)
    tuner = lab.spawn(
        "study", "start", "--space", str(space), "--n-trials", "8", "--sampler", "random",
        "--seed", "1", log="tuner",
    )  # fmt: skip
    lab.wait_for("the study file", (lab.studies / "watched.db").exists)
    port = free_port()
    dashboard = lab.spawn("dashboard", "--study-name", "watched", "--port", str(port), log="dash")
    answered_while_running = 0
    errors: list[str] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        while tuner.poll() is None:
            try:
                listing = client.get("/api/studies")
            except httpx.TransportError:
                time.sleep(0.1)  # the dashboard is still starting
                continue
            if listing.status_code != 200:
                errors.append(f"/api/studies {listing.status_code}: {listing.text[:200]}")
                continue
            for study in listing.json()["study_summaries"]:
                detail = client.get(f"/api/studies/{study['study_id']}", params={"after": 0})
                if detail.status_code == 200:
                    answered_while_running += tuner.poll() is None
                else:
                    errors.append(f"detail {detail.status_code}: {detail.text[:200]}")
        run = lab.finish(tuner)
        final = client.get("/api/studies").json()["study_summaries"][0]

        def finished_in_dashboard() -> list[str] | None:
            # (the dashboard refreshes running trials from its cache after a few seconds)
            url = f"/api/studies/{final['study_id']}"
            states = [t["state"] for t in client.get(url, params={"after": 0}).json()["trials"]]
            return states if states.count("Complete") + states.count("Pruned") == 8 else None

        states = lab.wait_for("the dashboard to show 8 finished trials", finished_in_dashboard, 60)
    # (SIGTERM: a Ctrl-C that lands while wsgiref answers a request is swallowed by it)
    dashboard.send_signal(signal.SIGTERM)
    served = lab.finish(dashboard, timeout=30)

    assert run.rc == 0, run.show()
    no_traceback(run)
    assert "locked" not in run.err
    assert "8 of 8 trials finished" in run.out
    assert not errors, errors
    assert answered_while_running >= 3, "the dashboard was not read during the study"
    assert len(states) == 8, states
    assert "locked" not in served.err
    assert len(lab.finished("watched")) == 8


def test_two_workers_share_one_sqlite_study(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("a second worker joining (SQLite)")
    two_workers(lab, "shared")


def test_claims_and_recovery_spare_live_tuners(lab: StudyLab) -> None:
    """A trial left RUNNING by a dead tuner is recovered and not counted as claimed; trials of
    live tuners (also one that has not written its record yet) are counted and left alone."""
    import optuna

    from autotune.study._claims import tuner_identity
    from autotune.study._storage import open_storage

    paths = study_paths("claims", studies_dir=lab.studies)
    storage = open_storage(paths)
    study = optuna.create_study(study_name="claims", storage=storage)
    mine = study.ask()
    storage.set_trial_system_attr(mine._trial_id, "autotune:tuner", tuner_identity())
    dead = study.ask()
    gone = dict(tuner_identity(), create_time=1.0)  # this pid, but another start: a dead tuner
    storage.set_trial_system_attr(dead._trial_id, "autotune:tuner", gone)
    fresh = study.ask()  # no record yet: a tuner between asking and recording
    assert fresh.number == 2
    study.tell(study.ask(), 1.0)
    claims = count_claims(study)
    assert (claims.finished, claims.running) == (1, 2)
    assert count_claims(study, exclude=mine.number).running == 1

    recovered = recover_stale(study)
    assert [r.number for r in recovered] == [dead.number]
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states[mine.number] == states[fresh.number] == "RUNNING"
    assert states[dead.number] == "FAIL"
    (queued,) = [t for t in study.get_trials() if t.state.name == "WAITING"]
    assert queued.user_attrs == {"role": "rerun", "autotune:rerun_of": dead.number}


def test_a_worker_on_another_machine_is_never_recovered_and_claims_for_one_trial(
    lab: StudyLab,
) -> None:
    """A tuner on another host cannot be checked: its trial is never failed by a resume here,
    and counts as claimed for as long as one trial can last (the engine's timeouts)."""
    import optuna

    from autotune.study._claims import longest_trial_s, tuner_identity
    from autotune.study._storage import open_storage

    storage = open_storage(study_paths("remote", studies_dir=lab.studies))
    study = optuna.create_study(study_name="remote", storage=storage)
    remote = study.ask()
    elsewhere = dict(tuner_identity(), host="another-machine.example")
    storage.set_trial_system_attr(remote._trial_id, "autotune:tuner", elsewhere)
    long = Timeouts()
    short = Timeouts(startup_s=0.1, benchmark_s=0.1, stop_s=0.1, gpu_release_s=0.1)
    assert longest_trial_s(long) == 1800 + 1800 + 2 * 30 + 120
    time.sleep(0.6)  # older than a trial of `short` can last
    assert count_claims(study, long).running == 1
    assert count_claims(study, short).running == 0
    assert recover_stale(study) == []
    assert storage.get_trial(remote._trial_id).state.name == "RUNNING"


def test_a_trial_asked_when_others_hold_the_target_is_given_back(lab: StudyLab) -> None:
    """Two workers asking at the same moment for the last trial: the one that finds the target
    covered once its trial exists gives it back unrun, and a queued configuration it took goes
    back to the queue."""
    import optuna

    from autotune.study._claims import claim, tuner_identity
    from autotune.study._storage import open_storage

    storage = open_storage(study_paths("last", studies_dir=lab.studies))
    study = optuna.create_study(study_name="last", storage=storage)
    study.tell(study.ask(), 1.0)
    other = study.ask()  # the other worker's trial: a live tuner (this process)
    storage.set_trial_system_attr(other._trial_id, "autotune:tuner", tuner_identity())
    config = dict(CONFIGS[0])
    study.enqueue_trial(config, user_attrs={"role": "enqueued"})
    mine = study.ask()  # takes the queued configuration
    assert not claim(study, mine._trial_id, 2, Timeouts())

    given_back = storage.get_trial(mine._trial_id)
    assert given_back.state.name == "FAIL"
    assert given_back.user_attrs["outcome"] == "surplus"
    assert given_back.params == {}  # never run
    (queued,) = [t for t in study.get_trials() if t.state.name == "WAITING"]
    assert queued.system_attrs["fixed_params"] == config
    assert queued.user_attrs == {"role": "enqueued"}
    # with room left under the target, a trial is kept
    assert claim(study, study.ask()._trial_id, 4, Timeouts())
