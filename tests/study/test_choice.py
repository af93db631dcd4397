"""The sampler choice with and without PyTorch (torch is the ``gp`` extra, not a base dependency).

"Without torch" is a real Python that cannot import it: a folder first on ``PYTHONPATH`` holds a
``torch`` package whose import raises ``ModuleNotFoundError`` as a missing one does. The code
under test is the real ``autotune`` command (``python -m autotune``) of this checkout, run on the
simulated server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune._errors import ConfigError
from autotune.study._choice import CPU_TORCH, GP_INSTALL, choose_sampler, torch_missing

from ._helpers import REPO, CliRun, finished_trials, small_space

NOTE = "sampler: TPE, not the GP sampler, because PyTorch cannot be imported here"


def _no_torch(root: Path) -> dict[str, str]:
    """The environment of a Python that cannot import torch (and imports this checkout)."""
    blocker = root / "no-torch" / "torch"
    blocker.mkdir(parents=True, exist_ok=True)
    (blocker / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n', encoding="utf-8"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(blocker.parent), str(REPO)])
    env["AUTOTUNE_NO_PROGRESS"] = "1"
    return env


def _python(*args: str, env: dict[str, str], cwd: Path = REPO, timeout: float = 300) -> CliRun:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return CliRun(tuple(args), done.returncode, done.stdout, done.stderr, 0.0)


def test_with_torch_auto_and_gp_are_the_gp_sampler() -> None:
    assert torch_missing() is None  # the test environment has the gp extra
    assert choose_sampler("auto", conditional=False).name == "gp"
    assert choose_sampler("auto", conditional=False).note is None
    assert choose_sampler("gp", conditional=True).name == "gp"
    assert choose_sampler("auto", conditional=True).name == "tpe"
    assert choose_sampler("random", conditional=False).name == "random"


def test_unknown_sampler_names_the_option() -> None:
    with pytest.raises(ConfigError) as e:
        choose_sampler("cmaes", conditional=False)
    assert "--sampler: unknown sampler 'cmaes'" in str(e.value)
    assert "auto, gp, tpe, random" in str(e.value)


def test_without_torch_the_choice_falls_back_only_where_it_may(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from autotune._errors import ConfigError\n"
        "from autotune.study._choice import choose_sampler, torch_missing\n"
        "out = {'missing': torch_missing()}\n"
        "for asked, cond in [('auto', False), ('auto', True), ('tpe', False), ('random', False),"
        " ('gp', False)]:\n"
        "    try:\n"
        "        c = choose_sampler(asked, conditional=cond)\n"
        "        out[f'{asked}-{cond}'] = [c.name, c.note]\n"
        "    except ConfigError as e:\n"
        "        out[f'{asked}-{cond}'] = ['error', str(e)]\n"
        "print(json.dumps(out))\n"
    )
    run = _python("-c", code, env=_no_torch(tmp_path))
    assert run.returncode == 0, run.describe()
    out = json.loads(run.stdout)
    assert out["missing"] == "ModuleNotFoundError: No module named 'torch'"
    name, note = out["auto-False"]
    assert name == "tpe" and note.startswith(NOTE) and GP_INSTALL in note
    assert out["auto-True"] == ["tpe", None]  # a conditional space is TPE's anyway
    assert out["tpe-False"] == ["tpe", None]
    assert out["random-False"] == ["random", None]
    kind, message = out["gp-False"]
    assert kind == "error"
    assert message.startswith("--sampler: the GP sampler needs PyTorch")
    assert GP_INSTALL in message and "--sampler tpe" in message


def test_study_without_torch_runs_with_tpe_and_says_so_once(tmp_path: Path) -> None:
    # a latency limit (one that never binds): a space the twin does not serve, so ``auto`` is
    # the GP sampler where PyTorch is installed
    limit = {"metric": "output_tok_s", "constraints": [{"metric": "itl_p99_ms", "max": 1e6}]}
    space = small_space(tmp_path, edit={"objective": limit})
    studies = tmp_path / "studies"
    n_trials = 9  # beyond the 6 start-up trials: TPE's model proposes the last ones
    run = _python(
        "-m",
        "autotune",
        "study",
        "start",
        "--space",
        str(space),
        "--study-name",
        "no-torch",
        "--n-trials",
        str(n_trials),
        "--studies-dir",
        str(studies),
        "--no-progress",
        "--seed",
        "1",
        env=_no_torch(tmp_path),
        timeout=600,
    )
    assert run.returncode == 0, run.describe()
    assert run.stderr.count(NOTE) == 1, run.describe()
    assert f"for the GP sampler install it with {GP_INSTALL}" in run.stderr
    assert f"PyTorch's CPU build is enough: {CPU_TORCH})" in run.stderr
    assert "Traceback" not in run.stderr
    assert "FutureWarning" not in run.stderr  # TPE as Optuna 5 takes it
    note = next(line for line in run.stderr.splitlines() if line.startswith(NOTE))
    assert note in (REPO / "README.md").read_text(encoding="utf-8")  # the README shows it as is

    import optuna

    study = optuna.load_study(study_name="no-torch", storage=f"sqlite:///{studies}/no-torch.db")
    assert len(finished_trials(study)) == n_trials

    # resuming it with the GP sampler asked for is refused before any trial runs
    resumed = _python(
        "-m",
        "autotune",
        "study",
        "resume",
        "--study-name",
        "no-torch",
        "--studies-dir",
        str(studies),
        "--n-trials",
        "2",
        "--sampler",
        "gp",
        env=_no_torch(tmp_path),
    )
    assert resumed.returncode == 2, resumed.describe()
    assert "--sampler: the GP sampler needs PyTorch" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert len(study.get_trials(deepcopy=False)) == n_trials


def test_gp_sampler_without_torch_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    space = small_space(tmp_path)
    studies = tmp_path / "studies"
    run = _python(
        "-m",
        "autotune",
        "study",
        "start",
        "--space",
        str(space),
        "--studies-dir",
        str(studies),
        "--sampler",
        "gp",
        env=_no_torch(tmp_path),
    )
    assert run.returncode == 2, run.describe()
    assert (
        "autotune: error: --sampler: the GP sampler needs PyTorch, which cannot be imported "
        in (run.stderr)
    )
    assert "No module named 'torch'" in run.stderr
    assert f"hint: install it with {GP_INSTALL}" in run.stderr
    assert CPU_TORCH in run.stderr and "or choose --sampler tpe" in run.stderr
    assert "Traceback" not in run.stderr
    assert not studies.exists()  # no study, no log, no server


def test_help_and_a_tpe_study_do_not_import_torch(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from autotune.cli import main\n"
        "import autotune.study, autotune.report, autotune.searchbench\n"
        "from autotune.study._choice import choose_sampler\n"
        "main(['study', 'start', '--help'])\n"
        "choose_sampler('tpe', conditional=False)\n"
        "choose_sampler('auto', conditional=True)\n"
        "print('torch imported:', 'torch' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = _python("-c", code, env=env)
    assert run.returncode == 0, run.describe()
    assert "--sampler" in run.stdout
    assert run.stdout.rstrip().endswith("torch imported: False"), run.describe()


def test_search_benchmark_without_torch_says_its_studies_are_tpe(tmp_path: Path) -> None:
    tiny = {
        "speculative_num_steps": {"type": "int", "low": 1, "high": 2},
        "speculative_eagle_topk": {"type": "categorical", "choices": [1, 2]},
        "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 3},
        "cuda_graph_max_bs": {"type": "categorical", "choices": [8, 16]},
        "mem_fraction_static": {"type": "float", "low": 0.80, "high": 0.82, "step": 0.01},
    }
    space = small_space(tmp_path, edit={"parameters": tiny})
    args = ("-m", "autotune", "bench", "search", "--space", str(space), "--seeds", "1")
    common = (*args, "--budget", "3", "--out", str(tmp_path / "bench"))
    run = _python(*common, "--samplers", "default", env=_no_torch(tmp_path))
    assert run.returncode == 0, run.describe()
    assert run.stderr.count(f"bench search: the tuner's studies: {NOTE}") == 1, run.describe()
    assert "default" in run.stdout
    plain = _python(*common, "--samplers", "tpe,random", env=_no_torch(tmp_path))
    assert plain.returncode == 0, plain.describe()
    assert NOTE not in plain.stderr  # Optuna's samplers as they come never needed torch


def test_auto_is_the_twin_where_the_twin_can_serve_the_study(tmp_path: Path) -> None:
    """``auto`` is the twin on an SGLang server whose box's facts are known (the simulator's
    profile, or a facts file on a real box) with one objective and no latency limits, with or
    without a load mix; GP elsewhere, and every sampler asked for by name is kept."""
    import dataclasses

    from autotune.space import ConstraintSpec, load_space
    from autotune.study._choice import twin_ready

    sim = load_space(small_space(tmp_path))
    assert sim.engine.kind == "sim" and twin_ready(sim, facts_known=False)
    assert choose_sampler("auto", conditional=False, twin=True).name == "twin"
    assert choose_sampler("auto", conditional=True, twin=True).name == "twin"
    for name in ("gp", "tpe", "random"):
        assert choose_sampler(name, conditional=False, twin=True).name == name

    real = dataclasses.replace(sim, engine=dataclasses.replace(sim.engine, kind="sglang"))
    assert not twin_ready(real, facts_known=False)  # no facts of the box: GP
    assert twin_ready(real, facts_known=True)
    vllm = dataclasses.replace(sim, engine=dataclasses.replace(sim.engine, kind="vllm"))
    assert not twin_ready(vllm, facts_known=True)  # the twin models SGLang
    limited = dataclasses.replace(
        sim,
        objective=dataclasses.replace(
            sim.objective, constraints=(ConstraintSpec("itl_p99_ms", max=5.0),)
        ),
    )
    assert not twin_ready(limited, facts_known=False)  # the twin predicts no latency percentile
    from autotune.space import LoadPoint

    mixed = dataclasses.replace(
        sim,
        objective=dataclasses.replace(
            sim.objective, loads=(LoadPoint(0.5, concurrency=1), LoadPoint(0.5, concurrency=64))
        ),
    )
    assert twin_ready(mixed, facts_known=False)  # it aims at each load point's winner too
