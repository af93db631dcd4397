"""`autotune space sample`: the launch commands of random proposals, for review before a study."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from autotune._errors import AutotuneError, ConfigError, EngineError
from autotune.cli._space_sample import register
from autotune.engines.sglang._rules import check_rules
from autotune.space import load_space

REPO = Path(__file__).resolve().parents[2]
SPACE = REPO / "search_spaces" / "eagle3.yaml"


def run(*args: str) -> list[str]:
    """Run ``space sample`` in a ``space`` group; return the stdout lines."""
    app = typer.Typer()
    register(app)

    @app.callback()
    def space() -> None:
        """space commands"""

    result = CliRunner().invoke(app, ["sample", *args], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def command(line: str) -> list[str]:
    """The argv of a printed command, without the leading environment assignments."""
    words = shlex.split(line)
    while words and "=" in words[0] and not words[0].startswith("/"):
        words.pop(0)
    return words


def test_one_line_per_proposal_with_refusals_counted() -> None:
    lines = run(str(SPACE), "-n", "12", "--seed", "3")
    assert len(lines) == 12
    space = load_space(SPACE)
    refusals = [check_rules(space.config_for(p)) for p in space.sample(12, seed=3)]
    for line, refusal in zip(lines, refusals, strict=True):
        if refusal is None:
            assert command(line)[:3] == [sys.executable, "-m", "autotune.sim"]
        else:
            assert line == f"# refused ({refusal.category}): {refusal.reason}"
    assert any(r is None for r in refusals)


def test_the_same_seed_prints_the_same_commands() -> None:
    assert run(str(SPACE), "-n", "5", "--seed", "9") == run(str(SPACE), "-n", "5", "--seed", "9")


@pytest.mark.parametrize(
    ("version", "present", "absent"),
    [
        ("0.5.23", "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
        ("0.5.3", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
    ],
)
def test_sglang_commands_in_the_release_spelling(version: str, present: str, absent: str) -> None:
    lines = run(str(SPACE), "-n", "20", "--engine", "sglang", "--sglang-version", version)
    commands = [command(line) for line in lines if not line.startswith("#")]
    assert commands
    for words in commands:
        assert words[1:3] == ["-m", "sglang.launch_server"]
        assert present in words and absent not in words


def test_without_sglang_here_the_hint_names_the_version_option() -> None:
    with pytest.raises(EngineError, match="not importable") as info:
        run(str(SPACE), "--engine", "sglang")
    assert info.value.hint is not None and "--sglang-version" in info.value.hint


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sglang-version", "0.5.23"], "applies to the sglang engine"),
        (["--engine", "tgi"], "unknown engine 'tgi'"),
    ],
)
def test_option_mistakes_are_config_errors(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        run(str(SPACE), *args)


def test_a_missing_space_file_is_an_autotune_error(tmp_path: Path) -> None:
    with pytest.raises(AutotuneError):
        run(str(tmp_path / "nope.yaml"))
