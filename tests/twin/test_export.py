"""``autotune twin export`` of a study on the simulator: the fitted profile file, served by the
simulated server and close to the true profile at random feasible configurations."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from study._helpers import run_in_process

from autotune.cli._twin_study import run_oracle_study
from autotune.searchbench._oracle import Oracle
from autotune.sim import SimModel, load_profile
from autotune.space import load_space

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "search_spaces" / "eagle3-h100.yaml"
READY = "The server is fired up and ready to roll!"


def autotune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``autotune ARGS`` in ``cwd``, run in this process (the command's behaviour; the
    simulated server it exports for is started as a process of its own below)."""
    done = run_in_process(args, cwd, {**os.environ, "AUTOTUNE_NO_PROGRESS": "1"})
    return subprocess.CompletedProcess(list(args), done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A 20-trial study of the tuner's loop on the simulator's model, stored in SQLite, and
    the profile ``autotune twin export`` printed for it."""
    folder = tmp_path_factory.mktemp("twin-study")
    url = run_oracle_study(str(SPACE), folder, trials=20, seed=3)
    done = autotune("twin", "export", "--study-name", "twin-check-3", "--storage", url, cwd=folder)
    assert done.returncode == 0, done.stderr
    path = folder / "mybox.yaml"
    path.write_text(done.stdout, encoding="utf-8")
    yield path, url


def test_the_exported_profile_predicts_within_5_percent(exported: tuple[Path, str]) -> None:
    path, _ = exported
    space = load_space(SPACE)
    truth = Oracle.for_space(SimModel(load_profile(space.engine.sim.profile)), space)
    twin = Oracle.for_space(SimModel(load_profile(path)), space)
    rng = random.Random(5)
    errors = []
    for params in space.sample(400, seed=rng.randrange(1 << 20)):
        config = space.config_for(params)
        if not truth.feasible(config):
            continue
        guess = twin.answer(config).value
        assert guess is not None, f"the twin predicts a crash of a feasible {config}"
        errors.append(abs(guess / truth.answer(config).value - 1))  # type: ignore[operator]
        if len(errors) == 20:
            break
    assert len(errors) == 20
    print(
        f"twin export errors at 20 feasible configurations: median {np.median(errors):.2%}, "
        f"p90 {np.quantile(errors, 0.9):.2%}, max {max(errors):.2%}"
    )
    assert max(errors) < 0.05


def test_the_export_says_what_its_trials_measured(exported: tuple[Path, str]) -> None:
    path, url = exported
    import optuna

    study = optuna.load_study(study_name="twin-check-3", storage=url)
    started = [t for t in study.trials if t.user_attrs.get("outcome") == "ok"]
    steps = {t.user_attrs["config"].get("speculative_num_steps") for t in started} - {None}
    head = " ".join(
        line[2:] for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")
    )
    assert f"Measured: {len(started)} started" in head
    shown = (
        f"steps {min(steps)}-{max(steps)}"
        if len(steps) > 3
        else "steps " + "/".join(str(s) for s in sorted(steps))
    )
    assert shown in head
    assert "CUDA-graph batch" in head and "static memory" in head


def test_sim_serve_serves_the_exported_profile(exported: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = exported
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "server.log"
    argv = [sys.executable, "-m", "autotune", "sim", "serve", "--model-path", "twin-model"]
    argv += ["--port", str(port), "--host", "127.0.0.1", "--sim-profile", str(path)]
    argv += ["--sim-time-scale", "0.0001", "--speculative-algorithm", "EAGLE3"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while READY not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/generate",
            json={"text": "hello", "sampling_params": {"max_new_tokens": 8}},
            timeout=30,
        )
        assert reply.status_code == 200 and reply.json()["meta_info"]["completion_tokens"] == 8
        assert "Load weight end" in log.read_text(errors="replace")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def test_sim_eval_reads_the_exported_file(exported: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = exported
    done = autotune(
        "sim",
        "eval",
        "--profile",
        str(path),
        "--param",
        "speculative_algorithm=EAGLE3",
        "--param",
        "speculative_num_steps=3",
        "--json",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert '"status": "ok"' in done.stdout


def test_export_of_an_unknown_study_is_one_message(exported: tuple[Path, str]) -> None:
    _, url = exported
    done = autotune("twin", "export", "--study-name", "nope", "--storage", url, cwd=ROOT)
    assert done.returncode != 0
    assert "no study named 'nope'" in done.stderr and "Traceback" not in done.stderr


def test_a_bad_facts_file_names_the_key(exported: tuple[Path, str], tmp_path: Path) -> None:
    _, url = exported
    facts = tmp_path / "facts.yaml"
    facts.write_text("gpu_name: NVIDIA H100\ngpu_cuont: 8\n", encoding="utf-8")
    done = autotune(
        "twin",
        "export",
        "--study-name",
        "twin-check-3",
        "--storage",
        url,
        "--facts",
        str(facts),
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert "facts.yaml" in done.stderr and "gpu_cuont" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_twin_check_of_a_twin_guided_study(tmp_path: Path) -> None:
    """``twin check --sampler twin`` fits the twin to the twin-guided study (which may stop
    before ``--trials``) and prints the exported profile's errors; an unknown sampler is one
    message, exit 2."""
    import re

    done = autotune(
        "twin", "check", "--space", str(SPACE), "--trials", "10", "--sampler", "twin", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    study = re.search(r"a study of (\d+) trials \((\d+) measured\)", done.stdout)
    assert study is not None, done.stdout
    assert 2 <= int(study.group(1)) <= 10
    errors = re.search(r"exported twin's predictions there: median ([\d.]+)%", done.stdout)
    assert errors is not None and float(errors.group(1)) < 5.0, done.stdout
    # the 20 compared configurations, split by what the study's started trials covered
    line = r"^  (\d+) (within|beyond) what the study's started trials covered: "
    line += r"median [\d.]+%, p90 [\d.]+%, max ([\d.]+)%$"
    groups = re.findall(line, done.stdout, re.M)
    assert groups and sum(int(n) for n, _, _ in groups) == 20, done.stdout
    top = re.search(r"exported twin's predictions there: .*max ([\d.]+)%", done.stdout)
    assert top is not None
    assert max(float(m) for _, _, m in groups) == float(top.group(1))
    worst = re.findall(r"^    ([+-][\d.]+)%  (speculative_num_steps=.*)$", done.stdout, re.M)
    assert len(worst) == 5, done.stdout
    sizes = [abs(float(e)) for e, _ in worst]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == float(top.group(1))
    for _, words in worst:
        assert "cuda_graph_max_bs=" in words and "mem_fraction_static=" in words
    bad = autotune("twin", "check", "--space", str(SPACE), "--sampler", "tpe", cwd=tmp_path)
    assert bad.returncode == 2
    assert "--sampler: unknown sampler 'tpe'" in bad.stderr and "Traceback" not in bad.stderr
