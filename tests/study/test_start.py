"""``autotune study start`` and ``resume`` as a user runs them, checked through plain Optuna.

The first test is the acceptance test of the tuner: the seed system's space, 15 trials, read back
with Optuna alone. It prints the figures of the run (``pytest -s`` shows them).
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import FrozenTrial, TrialState

from ._helpers import (
    RECORD_KEYS,
    SPACES,
    StudyRun,
    artifact_files,
    finished_trials,
    run_cli,
    small_space,
    start_study,
)

SPEC_FLAGS = ("--speculative-algorithm", "--speculative-num-steps", "--speculative-draft")


def _launch_line(report_text: str) -> str:
    lines = report_text.splitlines()
    assert "launch it with:" in lines, report_text
    return lines[lines.index("launch it with:") + 1].strip()


def _check_record(run: StudyRun, study: optuna.Study, t: FrozenTrial, baseline: float) -> None:
    """Everything the trial record promises about one finished trial."""
    attrs = t.user_attrs
    missing = [k for k in RECORD_KEYS if k not in attrs]
    assert not missing, f"trial {t.number} lacks {missing}: {attrs}"
    outcome = attrs["outcome"]
    files = artifact_files(run, study, t)
    if outcome == "infeasible":
        # refused before launch: no command, no server, the reason instead
        assert t.state == TrialState.PRUNED
        assert attrs["command"] is None
        assert attrs["failure_line"]
        assert "server.log" not in files
        return
    command = attrs["command"]
    assert isinstance(command, str)
    argv = shlex.split(command)
    assert Path(argv[0]).exists(), command
    assert "server.log" in files, f"trial {t.number}: no server log among {sorted(files)}"
    log = files["server.log"].read_text(encoding="utf-8", errors="replace")
    assert log.strip(), f"trial {t.number}: empty server log"
    assert isinstance(attrs["startup_s"], float) and attrs["startup_s"] >= 0
    speculative = attrs["config"].get("speculative_algorithm") == "EAGLE3"
    if outcome != "ok":
        assert t.state == TrialState.PRUNED
        assert attrs["output_tok_s"] is None and attrs.get("speedup") is None
        if outcome != "timeout" and "benchmark_error" not in attrs:
            # a start-up crash: the line that decided it is in the server's log
            assert attrs["failure_line"] and attrs["failure_line"] in log
        return
    assert t.state == TrialState.COMPLETE and t.value is not None
    assert attrs["output_tok_s"] > 0
    assert attrs["failure_line"] is None
    if speculative:
        assert attrs["accept_length"] >= 1.0, attrs
        assert 0.0 <= attrs["accept_rate"] <= 1.0, attrs
    else:
        assert attrs["accept_length"] is None and attrs["accept_rate"] is None
    assert attrs["speedup"] == pytest.approx(t.value / baseline, abs=2e-4)
    assert "benchmark.json" in files
    results = json.loads(files["benchmark.json"].read_text(encoding="utf-8"))
    assert results, f"trial {t.number}: empty benchmark results"


def _demo_summary(study: optuna.Study, report: dict[str, Any], wall_s: float) -> str:
    trials = finished_trials(study)
    outcomes = Counter(str(t.user_attrs["outcome"]) for t in trials)
    crashes: dict[str, list[int]] = {}
    for t in trials:
        if t.user_attrs["outcome"] not in ("ok", "infeasible"):
            crashes.setdefault(str(t.user_attrs["outcome"]), []).append(t.number)
    crash_text = ", ".join(
        f"{k} {len(v)} (trial{'s' if len(v) > 1 else ''} {', '.join(map(str, v))})"
        for k, v in sorted(crashes.items())
    )
    best = report["best"]
    knobs = " ".join(f"{k}={v}" for k, v in best["config"].items())
    minutes, seconds = divmod(round(wall_s), 60)
    lines = [
        "autotune study start --space search_spaces/eagle3.yaml --study-name demo --n-trials 15",
        f"trials: {report['finished']} finished: {outcomes['ok']} measured, "
        f"{sum(len(v) for v in crashes.values())} crashed, "
        f"{outcomes['infeasible']} refused before launch",
        f"crashes by category: {crash_text or 'none'}",
        "proposals the tuner refused without a server start: "
        + (
            ", ".join(f"{k} {v}" for k, v in sorted(report["refused_before_launch"].items()))
            or "none"
        ),
        f"baseline (trial 0, no speculation): {report['baseline_value']:.2f} {report['metric']}",
        report["verdict"]["headline"],
        f"confirmation: {report['verdict']['rounds']} rounds, {report['verdict']['starts']} "
        f"server starts, {report['verdict']['gpu_hours']:.1f} GPU h",
        f"chosen: trial {best['number']} ({best['role']}): {best['value']:.2f} "
        f"{report['metric']}, x{best['speedup']:.2f} over the baseline in its search run",
        f"  {knobs}",
        f"  {report['best_sglang_command']}",
        f"wall time: {wall_s:.0f} s ({minutes} min {seconds:02d} s)",
    ]
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_seed_space_study_of_15_trials(tmp_path: Path) -> None:
    studies = tmp_path / "studies"
    start = run_cli(
        "study",
        "start",
        "--space",
        "search_spaces/eagle3.yaml",
        "--study-name",
        "demo",
        "--n-trials",
        "15",
        "--studies-dir",
        str(studies),
        timeout=1500,
    )
    assert start.returncode == 0, start.describe()
    # the twin-guided search (the default on the simulator) may stop before the target, and
    # then says why
    done = re.search(r"demo: (\d+) of 15 trials finished(.*)", start.stdout)
    assert done is not None, start.describe()
    finished = int(done.group(1))
    assert 8 <= finished <= 15, start.describe()
    if finished < 15:
        assert done.group(2).startswith(" (the search stopped: "), done.group(2)
    run = StudyRun("demo", studies, SPACES / "eagle3.yaml", finished, start)
    study = optuna.load_study(study_name="demo", storage=run.storage_url)

    trials = finished_trials(study)
    assert [t.number for t in trials] == list(range(finished))
    assert len(study.trials) == finished, [(t.number, t.state) for t in study.trials]

    baseline = trials[0]
    assert baseline.user_attrs["role"] == "baseline"
    assert baseline.user_attrs["outcome"] == "ok", baseline.user_attrs
    assert not any(flag in baseline.user_attrs["command"] for flag in SPEC_FLAGS)
    assert baseline.user_attrs["accept_length"] is None
    assert baseline.user_attrs["speedup"] == 1.0
    assert baseline.value is not None

    space = yaml.safe_load((SPACES / "eagle3.yaml").read_text(encoding="utf-8"))
    assert trials[1].user_attrs["role"] == "enqueued"
    assert trials[1].params == space["enqueue"]["configs"][0]
    roles = [t.user_attrs["role"] for t in trials[2:]]
    assert set(roles) <= {"informed", "search"} and "search" in roles, roles

    for t in trials:
        _check_record(run, study, t, baseline.value)

    # the search is confirmed: the verdict is printed and is the report's first line
    as_json = run_cli("study", "report", *run.cli_args(), "--json")
    assert as_json.returncode == 0, as_json.describe()
    data = json.loads(as_json.stdout)
    verdict = data["verdict"]
    assert verdict is not None and verdict["kind"] in ("pays", "noise", "costs"), verdict
    assert verdict["headline"] in start.stdout
    assert verdict["starts"] >= 2 * verdict["rounds"] >= 2 * 3, verdict
    assert verdict["gpu_hours"] > 0
    report = run_cli("study", "report", *run.cli_args())
    assert report.returncode == 0, report.describe()
    text = report.stdout
    assert text.splitlines()[0] == verdict["headline"]
    if verdict["kind"] == "pays":
        best = next(t for t in trials if t.number == verdict["choice"])
    else:  # the verdict's choice is no speculation
        assert verdict["choice"] is None
        best = baseline
    assert best.value is not None
    head = f"confirmed choice: trial {best.number} ({best.user_attrs['role']}): {best.value:.2f}"
    assert head in text, text
    assert "confirmed: " in text and " GPU h" in text
    launch = _launch_line(text)
    assert launch == best.user_attrs["sglang_command"]
    argv = shlex.split(launch)
    assert argv[1:3] == ["-m", "sglang.launch_server"], launch
    config = best.user_attrs["config"]
    for knob in ("speculative_num_steps", "speculative_eagle_topk", "mem_fraction_static"):
        if knob in config:
            flag = "--" + knob.replace("_", "-")
            assert argv[argv.index(flag) + 1] == str(config[knob]), (flag, launch)

    assert data["best"]["number"] == best.number
    print("\n" + _demo_summary(study, data, start.wall_s))


# --- the faster studies: a small copy of eagle3-h100.yaml ------------------------------------


def test_space_with_an_error_is_refused_before_anything_launches(tmp_path: Path) -> None:
    text = (SPACES / "eagle3-h100.yaml").read_text(encoding="utf-8")
    good = "speculative_eagle_topk: {type: categorical, choices: [1, 2, 4, 8, 10]}"
    assert good in text
    bad_text = text.replace(
        good, "speculative_eagle_topk: {type: categorical, choices: [1, 2, 4, 4]}"
    )
    line = next(i for i, s in enumerate(bad_text.splitlines(), 1) if "[1, 2, 4, 4]" in s)
    space = tmp_path / "mine.yaml"
    space.write_text(bad_text, encoding="utf-8")
    studies = tmp_path / "studies"

    run = run_cli(
        "study",
        "start",
        "--space",
        "mine.yaml",
        "--n-trials",
        "3",
        "--studies-dir",
        str(studies),
        cwd=tmp_path,
    )

    assert run.returncode == 2, run.describe()
    assert f"mine.yaml:{line} (parameters.speculative_eagle_topk.choices[3])" in run.stderr
    assert "duplicate choice 4" in run.stderr
    assert "Traceback" not in run.stderr
    assert not studies.exists() or not any(studies.iterdir()), list(studies.rglob("*"))


def test_unknown_knob_names_its_line(tmp_path: Path) -> None:
    text = (SPACES / "eagle3-h100.yaml").read_text(encoding="utf-8")
    old = "  cuda_graph_max_bs: {type: categorical"
    assert old in text
    bad_text = text.replace(old, "  cuda_graph_max_batch: {type: categorical")
    line = next(i for i, s in enumerate(bad_text.splitlines(), 1) if "cuda_graph_max_batch" in s)
    space = tmp_path / "typo.yaml"
    space.write_text(bad_text, encoding="utf-8")

    run = run_cli(
        "study",
        "start",
        "--space",
        str(space),
        "--studies-dir",
        str(tmp_path / "studies"),
    )

    assert run.returncode == 2, run.describe()
    assert f"typo.yaml:{line}" in run.stderr
    assert "cuda_graph_max_batch" in run.stderr
    assert not (tmp_path / "studies").exists()


def _trial_key(t: FrozenTrial) -> tuple[Any, ...]:
    return (t.number, t.state, t.value, t.params, t.datetime_start, t.user_attrs.get("outcome"))


def test_resume_of_a_finished_study_runs_to_the_new_target(tmp_path: Path) -> None:
    space = small_space(tmp_path)
    studies = tmp_path / "studies"
    run = start_study(space, "h100", 3, studies)
    assert "h100: 3 of 3 trials finished" in run.start.stdout
    before = [_trial_key(t) for t in finished_trials(run.load())]
    assert len(before) == 3

    again = run_cli("study", "start", "--space", str(space), *run.cli_args(), "--n-trials", "4")
    assert again.returncode != 0
    assert "already exists" in again.stderr and "autotune study resume" in again.stderr
    assert len(run.load().trials) == 3

    # two more (--n-trials counts from the finished trials; --target-trials is a total)
    resumed = run_cli("study", "resume", *run.cli_args(), "--n-trials", "2", "--no-progress")
    assert resumed.returncode == 0, resumed.describe()
    assert "h100: 5 of 5 trials finished" in resumed.stdout
    study = run.load()
    trials = finished_trials(study)
    assert [t.number for t in trials] == [0, 1, 2, 3, 4]
    assert len(study.trials) == 5
    assert [_trial_key(t) for t in trials[:3]] == before
    assert {t.user_attrs["role"] for t in trials[3:]} <= {"search", "informed"}
    assert study.user_attrs["autotune:n_trials"] == 5

    status = run_cli("study", "status", *run.cli_args())
    assert status.returncode == 0, status.describe()
    assert status.stdout.startswith("h100: 5/5 finished, 0 running, 0 interrupted")

    # without a new target a finished study has nothing left to run
    idle = run_cli("study", "resume", *run.cli_args(), "--no-progress")
    assert idle.returncode == 0, idle.describe()
    assert "h100: 5 of 5 trials finished" in idle.stdout
    assert len(run.load().trials) == 5


def test_resume_of_a_missing_study_says_so(tmp_path: Path) -> None:
    space = small_space(tmp_path)
    start_study(space, "present", 1, tmp_path / "studies")

    missing = run_cli(
        "study", "resume", "--study-name", "absent", "--studies-dir", str(tmp_path / "studies")
    )

    assert missing.returncode != 0
    assert "no study named 'absent'" in missing.stderr
    assert "Traceback" not in missing.stderr
