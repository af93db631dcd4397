"""``autotune study start`` on the vLLM space, against the simulated vLLM server, as a user runs
it, read back with plain Optuna: a baseline, crashes classified by vLLM's rules, acceptance from
vLLM's ``/metrics``, and a report that prints the ``vllm serve`` command of the choice."""

from __future__ import annotations

import shlex
from pathlib import Path

from optuna.trial import TrialState

from ._helpers import artifact_files, finished_trials, run_cli, small_space, start_study

#: A share too small for one request of the model's 131,072 tokens: vLLM refuses to start.
TOO_SMALL = {"speculative_num_steps": 4, "cuda_graph_max_bs": 512, "gpu_memory_utilization": 0.35}


def test_a_vllm_study_runs_end_to_end_on_the_simulated_vllm_server(tmp_path: Path) -> None:
    space = small_space(tmp_path, "vllm-eagle3-h100.yaml", configs=[TOO_SMALL])
    run = start_study(space, "vllm-e2e", 6, tmp_path / "studies")
    study = run.load()
    trials = finished_trials(study)
    assert len(trials) >= 6, run.start.describe()

    baseline = trials[0]
    assert baseline.user_attrs["role"] == "baseline" and baseline.state == TrialState.COMPLETE
    assert baseline.user_attrs["accept_length"] is None  # no speculation, no drafts counted
    argv = shlex.split(baseline.user_attrs["command"])
    assert argv[argv.index("autotune.sim") + 1] == "serve"
    assert "--speculative-config" not in argv

    crashed = [t for t in trials if t.user_attrs["outcome"] == "oom_kv_pool"]
    assert crashed, [(t.number, t.user_attrs["outcome"]) for t in trials]
    for t in crashed:
        assert t.state == TrialState.PRUNED
        line = t.user_attrs["failure_line"]
        assert "max seq len" in line or "No available memory for the cache blocks" in line, line
        log = artifact_files(run, study, t)["server.log"].read_text(encoding="utf-8")
        assert "Engine core initialization failed" in log

    measured = [
        t
        for t in trials
        if t.user_attrs["outcome"] == "ok" and t.user_attrs["config"].get("speculative_num_steps")
    ]
    assert measured, [(t.number, t.user_attrs["outcome"]) for t in trials]
    for t in measured:
        assert t.user_attrs["acceptance_source"] == "metrics_diff"
        assert (
            1.0
            < t.user_attrs["accept_length"]
            <= t.user_attrs["config"]["speculative_num_steps"] + 1
        )
        assert 0.0 < t.user_attrs["accept_rate"] <= 1.0
        assert t.user_attrs["sglang_command"].startswith("vllm serve ")

    report = run_cli("study", "report", *run.cli_args())
    assert report.returncode == 0, report.describe()
    lines = report.stdout.splitlines()
    launch = lines[lines.index("launch it with:") + 1].strip()
    words = shlex.split(launch)
    assert words[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"], launch
    config = words[words.index("--speculative-config") + 1]
    assert '"method": "eagle3"' in config and "--gpu-memory-utilization" in words
    assert "oom_kv_pool" in report.stdout
