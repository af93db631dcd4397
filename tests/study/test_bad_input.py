"""Mistakes in what a user gives ``autotune study``: each is refused with a message that names the
problem and says what to do, with no traceback, before any server is launched and (where the
mistake is found first) before any study database is created."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ._lab import CONFIGS, PARAMETERS, Run, StudyLab, no_traceback

SPACE_HEAD = "name: bad\nengine: {kind: sim, model_path: meta-llama/Llama-3.1-8B-Instruct}\n"
MEM = "  mem_fraction_static: {type: float, low: 0.7, high: 0.9}\n"

#: name -> (space text, exit code, phrases the message must contain)
BAD_SPACES: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "malformed YAML": (
        SPACE_HEAD + "parameters:\n  speculative_num_steps: {type: int, low: 1, high: 4\n",
        2,
        ("bad.yaml:", "not valid YAML", "hint:"),
    ),
    "unknown key": (
        SPACE_HEAD + "bogus_key: 1\nparameters:\n" + MEM,
        2,
        ("bad.yaml:3 (bogus_key)", "unknown key 'bogus_key'", "allowed:"),
    ),
    "impossible range": (
        SPACE_HEAD + "parameters:\n  mem_fraction_static: {type: float, low: 0.9, high: 0.7}\n",
        2,
        ("parameters.mem_fraction_static", "low (0.9) must be below high (0.7)"),
    ),
    "categorical with no choices": (
        SPACE_HEAD + "parameters:\n  allreduce: {type: categorical, choices: []}\n",
        2,
        ("parameters.allreduce.choices", "choices must be a non-empty list"),
    ),
    "model path that does not exist": (
        "name: bad\nengine: {kind: sglang, model_path: /nonexistent/model, check_paths: true}\n"
        "parameters:\n" + MEM,
        2,
        ("engine.model_path", "'/nonexistent/model' is not a directory", "check_paths: false"),
    ),
    "a fixed knob that SGLang's rules refuse with every proposal": (
        "name: bad\nengine: {kind: sglang, sglang_version: '0.5.23', model_path: /m, "
        "check_paths: false}\nfixed: {speculative_algorithm: NGRAM, speculative_adaptive: true}\n"
        "parameters:\n" + MEM,
        2,
        (
            "SGLang 0.5.23",
            "refuses every proposal of this space: fixed.speculative_adaptive",
            "adaptive speculation runs EAGLE and EAGLE3 only",
            "hint: change that fixed knob",
        ),
    ),
    "a switch the release does not have": (
        "name: bad\nengine: {kind: sglang, sglang_version: '0.5.23', model_path: /m, "
        "draft_model_path: /d, check_paths: false}\n"
        "fixed: {speculative_algorithm: EAGLE3, spec_v2: true}\nparameters:\n" + MEM,
        2,
        ("fixed.spec_v2: True", "reads no SGLANG_ENABLE_SPEC_V2", "later ones always run the v2"),
    ),
}


def _refused(lab: StudyLab, run: Run, code: int, phrases: tuple[str, ...], name: str) -> None:
    assert run.rc == code, run.show()
    no_traceback(run)
    assert run.err.startswith("autotune: error: "), run.show()
    for phrase in phrases:
        assert phrase in run.err, (phrase, run.show())
    assert not (lab.studies / f"{name}.db").exists(), "a study database was created"
    assert not list(lab.root.rglob("server.log")), "a server was launched"
    assert "trial 0" not in run.text


@pytest.mark.parametrize("case", list(BAD_SPACES))
def test_bad_space_is_refused(
    lab: StudyLab, bad_input_tried: Callable[[str], None], case: str
) -> None:
    bad_input_tried(case)
    text, code, phrases = BAD_SPACES[case]
    space = lab.write("bad.yaml", text)
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "1")
    _refused(lab, run, code, phrases, "bad")


def test_engine_that_is_not_installed(
    lab: StudyLab, bad_input_tried: Callable[[str], None]
) -> None:
    bad_input_tried("engine not installed")
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is installed in this interpreter")
    model = lab.root / "model"
    model.mkdir()
    text = (
        f"name: bad\nengine: {{kind: sglang, model_path: {model}, python: {sys.executable}}}\n"
        "parameters:\n" + MEM
    )
    space = lab.write("bad.yaml", text)
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "1")
    _refused(
        lab,
        run,
        1,
        (f"SGLang is not importable by {sys.executable}", "No module named 'sglang'", "hint:"),
        "bad",
    )


@pytest.mark.parametrize(
    ("case", "url", "phrase"),
    [
        ("unreachable database", "postgresql://nobody@127.0.0.1:1/x", "127.0.0.1"),
        ("unknown storage scheme", "nosuch://host/db", "nosuch"),
    ],
)
def test_storage_that_cannot_be_opened(
    lab: StudyLab, bad_input_tried: Callable[[str], None], case: str, url: str, phrase: str
) -> None:
    bad_input_tried(case)
    space = lab.space("stored")
    run = lab.cli("study", "start", "--space", str(space), "--storage", url, "--n-trials", "1")
    _refused(lab, run, 1, (f"cannot open the study storage '{url}'", phrase, "hint:"), "stored")
    assert not lab.studies.exists()


def test_study_name_taken_by_another_space(
    lab: StudyLab, bad_input_tried: Callable[[str], None]
) -> None:
    bad_input_tried("study name taken by another space")
    first = lab.space("taken", baseline=False, configs=CONFIGS[:1])
    other_params = dict(PARAMETERS)
    other_params["mem_fraction_static"] = {"type": "float", "low": 0.6, "high": 0.9}
    other = lab.space("taken", baseline=False, parameters=other_params, file="other.yaml")
    same = lab.space("taken", baseline=False, configs=CONFIGS[:1], file="same.yaml", stop_s=20)
    run = lab.cli("study", "start", "--space", str(first), "--n-trials", "1")
    assert run.rc == 0, run.show()
    before = [(t.number, t.value) for t in lab.finished("taken")]
    servers_before = _launched(lab.root)

    refused = lab.cli("study", "start", "--space", str(other), "--n-trials", "2")
    assert refused.rc == 1, refused.show()
    no_traceback(refused)
    assert "study 'taken' already exists with another search space" in refused.err
    assert "choose another --study-name" in refused.err

    again = lab.cli("study", "start", "--space", str(first), "--n-trials", "2")
    assert again.rc == 1, again.show()
    assert "autotune study resume --study-name taken" in again.err

    wrong = lab.cli("study", "resume", "--study-name", "taken", "--space", str(other))
    assert wrong.rc == 1, wrong.show()
    no_traceback(wrong)
    assert "was created with another search space" in wrong.err
    assert str(other) in wrong.err
    assert _launched(lab.root) == servers_before, "a refused command launched a server"
    assert [(t.number, t.value) for t in lab.finished("taken")] == before

    # the engine section (here: port and stop timeout) may differ: the same space resumes
    ok = lab.cli(
        "study", "resume", "--study-name", "taken", "--space", str(same), "--n-trials", "1"
    )
    assert ok.rc == 0, ok.show()
    assert "2 of 2 trials finished" in ok.out
    assert [(t.number, t.value) for t in lab.finished("taken")][:1] == before


def test_resume_of_a_study_that_does_not_exist(
    lab: StudyLab, bad_input_tried: Callable[[str], None]
) -> None:
    bad_input_tried("resume of an unknown study")
    lab.studies.mkdir()
    run = lab.cli("study", "resume", "--study-name", "nothing-here")
    assert run.rc == 1, run.show()
    no_traceback(run)
    assert "no study named 'nothing-here'" in run.err
    assert "autotune study list" in run.err
    assert not list(lab.studies.iterdir()), "resume created a file"


def _launched(root: Path) -> int:
    return len(list(root.rglob("server.log")))
