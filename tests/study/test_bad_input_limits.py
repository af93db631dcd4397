"""Input that used to crash or exhaust memory, and options that were accepted or refused too late:
each is refused through the real CLI with a located message (file:line (key), or the option's
name), exit code 2, no traceback, and nothing created (no study database, no file, no server).

Every space case runs through both `autotune space check` and `autotune study start`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ._lab import FAST_PROFILE, Run, StudyLab, no_traceback

HEAD = (
    "name: bad\nengine:\n  kind: sim\n  model_path: meta-llama/Llama-3.1-8B-Instruct\n"
    "  sim: {profile: " + FAST_PROFILE + "}\n"
)
MEM = "  mem_fraction_static: {type: float, low: 0.7, high: 0.9}\n"
PARAMS = "parameters:\n" + MEM


def _engine(extra: str) -> str:
    """HEAD with ``extra`` (lines of the engine section, indented by two) added."""
    return (
        "name: bad\nengine:\n  kind: sim\n  model_path: meta-llama/Llama-3.1-8B-Instruct\n" + extra
    )


def _bomb() -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return HEAD + "\n".join(lines) + "\n" + PARAMS


#: name -> (space text, phrases the message must contain)
LIMIT_SPACES: dict[str, tuple[str, tuple[str, ...]]] = {
    "alias bomb": (_bomb(), ("bad.yaml:", "aliases (*name) expand to more than")),
    "1000 levels of nesting": (
        HEAD + "deep: " + "[" * 1000 + "]" * 1000 + "\n" + PARAMS,
        ("bad.yaml:6:", "nesting deeper than 64 levels"),
    ),
    "1000 levels of block nesting": (
        HEAD + "".join(" " * i + f"k{i}:\n" for i in range(1000)) + PARAMS,
        ("bad.yaml:", "nesting deeper than 64 levels"),
    ),
    "20 MB description": (
        HEAD + "description: " + "lorem ipsum " * (20 * 1024 * 1024 // 12) + "\n" + PARAMS,
        ("bad.yaml:1", "more than 1,048,576 characters long"),
    ),
    "long description": (
        HEAD + "description: " + "lorem ipsum " * 3000 + "\n" + PARAMS,
        ("bad.yaml:6 (description)", "at most 20,000 are allowed"),
    ),
    "integer of 5000 digits": (
        HEAD
        + "parameters:\n  max_running_requests: {type: int, low: 1, high: "
        + "9" * 5000
        + "}\n",
        ("(parameters.max_running_requests.high)", "cannot read the value"),
    ),
    "int range 1..1e30": (
        HEAD + "parameters:\n  max_running_requests: {type: int, low: 1, high: "
        "1000000000000000000000000000000}\n",
        ("bad.yaml:7 (parameters.max_running_requests.high)", "out of range"),
    ),
    "int range 1..1e9": (
        HEAD + "parameters:\n  max_running_requests: {type: int, low: 1, high: 1000000000}\n",
        ("(parameters.max_running_requests.high)", "at most 1,000,000 are allowed"),
    ),
    "float grid of 8e8 steps": (
        HEAD + "parameters:\n  mem_fraction_static: {type: float, low: 0.1, high: 0.9, "
        "step: 1.0e-9}\n",
        ("(parameters.mem_fraction_static.step)", "at most 1,000,000 are allowed"),
    ),
    "fixed knob of 1e14": (
        HEAD + "fixed: {max_running_requests: 100000000000000}\n" + PARAMS,
        ("(fixed.max_running_requests)", "out of range"),
    ),
    "= in an env key": (
        _engine("  env: {'A=B': x}\n") + PARAMS,
        ("(engine.env.A=B)", "not a usable environment variable name"),
    ),
    "NUL in an env key": (
        _engine('  env: {"A\\0B": x}\n') + PARAMS,
        ("(engine.env.A\\x00B)", "not a usable environment variable name"),
    ),
    "NUL in an env value": (
        _engine('  env: {A: "x\\0y"}\n') + PARAMS,
        ("(engine.env.A)", "contains a NUL character"),
    ),
    "NUL in an argument": (
        _engine('  extra_args: ["--x\\0y"]\n') + PARAMS,
        ("(engine.extra_args[0])", "contains a NUL character"),
    ),
    "unknown simulator profile": (
        _engine("  sim: {profile: no-such-profile}\n") + PARAMS,
        ("bad.yaml:5 (engine.sim.profile)", "unknown simulator profile", FAST_PROFILE),
    ),
    "unknown fault": (
        _engine("  sim: {profile: " + FAST_PROFILE + ", faults: [explode]}\n") + PARAMS,
        ("(engine.sim.faults[0])", "unknown fault 'explode'", "endless_line"),
    ),
    "fault with a bad argument": (
        _engine("  sim: {profile: " + FAST_PROFILE + ", faults: ['garbage:x']}\n") + PARAMS,
        ("(engine.sim.faults[0])", "garbage needs a request count"),
    ),
    "absurd tp": (
        _engine("  tp_size: 1000000\n") + PARAMS,
        ("bad.yaml:5 (engine.tp_size)", "<= 256"),
    ),
    "tp beyond the profile's GPUs": (
        _engine("  tp_size: 2\n  sim: {profile: " + FAST_PROFILE + "}\n") + PARAMS,
        ("(engine.tp_size)", "more than the 1 GPU(s)"),
    ),
    "absurd time scale": (
        _engine("  sim: {profile: " + FAST_PROFILE + ", time_scale: 1.0e+300}\n") + PARAMS,
        ("(engine.sim.time_scale)", "<= 100"),
    ),
    "infinite timeout": (
        _engine("  timeouts: {startup_s: .inf}\n") + PARAMS,
        ("(engine.timeouts.startup_s)", "must be a number"),
    ),
    "absurd input length": (
        HEAD + "workload: {input_len: 1000000000}\n" + PARAMS,
        ("bad.yaml:6 (workload.input_len)", "at most 2,000,000"),
    ),
    "absurd prompt count": (
        HEAD + "workload: {input_len: 100000, num_prompts: 100000}\n" + PARAMS,
        ("(workload.num_prompts)", "prompt tokens; at most"),
    ),
    "study name that leaves the folder": (
        HEAD.replace("name: bad", "name: ../escape") + PARAMS,
        ("bad.yaml:1 (name)", "not a usable study name"),
    ),
}


def _refused(lab: StudyLab, run: Run, phrases: tuple[str, ...]) -> None:
    assert run.rc == 2, run.show()
    no_traceback(run)
    assert run.err.startswith("autotune: error: "), run.show()
    for phrase in phrases:
        assert phrase in run.err, (phrase, run.show())
    assert len(run.err) < 4000, "the message repeats the bad input"
    assert not lab.studies.exists(), "the studies folder was created"
    assert not list(lab.root.rglob("*.db")), "a study database was created"
    assert not list(lab.root.rglob("server.log")), "a server was launched"


@pytest.mark.parametrize("case", list(LIMIT_SPACES))
def test_space_beyond_the_limits_is_refused(
    lab: StudyLab, bad_input_tried: Callable[[str], None], case: str
) -> None:
    bad_input_tried(case)
    text, phrases = LIMIT_SPACES[case]
    space = lab.write("bad.yaml", text)
    check = lab.cli("space", "check", str(space), timeout=60)
    _refused(lab, check, phrases)
    start = lab.cli("study", "start", "--space", str(space), "--n-trials", "1", timeout=60)
    _refused(lab, start, phrases)


#: name -> (options of `study start`, phrases of the message)
BAD_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "study name ../x": (("--study-name", "../x"), ("--study-name: '../x'", "letters, digits")),
    "study name with a leading dot": (("--study-name", ".hidden"), ("--study-name",)),
    "study name of 300 characters": (("--study-name", "a" * 300), ("at most 100 characters",)),
    "seed -1": (("--seed", "-1"), ("--seed: must be between 0 and 4294967295",)),
    "seed 2**40": (("--seed", str(2**40)), ("--seed",)),
    "timeout -5": (("--timeout", "-5"), ("--timeout: must be a number of seconds above 0",)),
    "timeout nan": (("--timeout", "nan"), ("--timeout:", "got nan")),
    "timeout inf": (("--timeout", "inf"), ("--timeout:", "got inf")),
    "n-trials 0": (("--n-trials", "0"), ("--n-trials",)),
    "n-trials -1": (("--n-trials", "-1"), ("--n-trials",)),
    "sampler gpp": (("--sampler", "gpp"), ("--sampler: unknown sampler 'gpp'", "auto, gp, tpe")),
    "storage sqlite://": (("--storage", "sqlite://"), ("--storage:", "in-memory database")),
    "storage :memory:": (("--storage", ":memory:"), ("in-memory database", "would vanish")),
    "storage sqlite:///:memory:": (("--storage", "sqlite:///:memory:"), ("in-memory",)),
}


@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_bad_option_is_refused_before_the_study_exists(
    lab: StudyLab, bad_input_tried: Callable[[str], None], case: str
) -> None:
    bad_input_tried(case)
    options, phrases = BAD_OPTIONS[case]
    space = lab.space("opts")
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "1", *options)
    assert run.rc == 2, run.show()
    no_traceback(run)
    for phrase in phrases:
        assert phrase in run.err, (phrase, run.show())
    assert not lab.studies.exists(), "the studies folder was created"
    assert not list(lab.root.parent.rglob("x.db")), "a file was written outside the folder"
    assert not list(lab.root.rglob("*.db")), "a study database was created"


def test_resume_and_report_refuse_an_unsafe_study_name(
    lab: StudyLab, bad_input_tried: Callable[[str], None]
) -> None:
    bad_input_tried("study name ../x on resume and report")
    for command in ("resume", "report", "status"):
        run = lab.cli("study", command, "--study-name", "../x")
        assert run.rc == 2, run.show()
        no_traceback(run)
        assert "not a usable study name" in run.err
    assert not lab.studies.exists()


@pytest.mark.parametrize(
    ("url", "phrase"),
    [
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://127.0.0.1:0", "port 0 is out of range"),
        ("ftp://127.0.0.1:30000", "not an HTTP URL"),
        ("http://", "names no host"),
    ],
)
def test_bench_run_refuses_a_bad_url(
    lab: StudyLab, bad_input_tried: Callable[[str], None], url: str, phrase: str
) -> None:
    bad_input_tried(f"bench run --url {url}")
    run = lab.cli("bench", "run", "--url", url, "--num-prompts", "1")
    assert run.rc == 2, run.show()
    no_traceback(run)
    assert f"--url: {url!r}" in run.err and phrase in run.err, run.show()


def test_bench_workload_file_beyond_the_limits(
    lab: StudyLab, bad_input_tried: Callable[[str], None], tmp_path: Path
) -> None:
    bad_input_tried("bench workload alias bomb")
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    bomb = lab.write("bomb.yaml", "\n".join(lines) + "\n")
    run = lab.cli("bench", "run", "--url", "http://127.0.0.1:1", "--workload", str(bomb))
    assert run.rc == 2, run.show()
    no_traceback(run)
    assert "aliases (*name) expand" in run.err
    big = lab.write("big.yaml", "input_len: 1000000000\n")
    run = lab.cli("bench", "run", "--url", "http://127.0.0.1:1", "--workload", str(big))
    assert run.rc == 2, run.show()
    assert "workload.input_len" in run.err and "at most 2,000,000" in run.err
