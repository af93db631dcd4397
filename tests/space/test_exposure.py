"""What the server may listen on, and flags of extra_args that argparse would read as owned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune._errors import ConfigError
from autotune.engines.sglang._section import owned_flag
from autotune.space import load_space
from autotune.space._schema import is_loopback

from .test_schema import SPEC


def _load(tmp_path: Path, engine: str) -> Any:
    path = tmp_path / "space.yaml"
    path.write_text(SPEC + "engine:\n" + engine)
    return load_space(path), path


def _refused(tmp_path: Path, engine: str) -> tuple[str, Path]:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, engine)
    assert info.value.exit_code == 2
    return str(info.value), tmp_path / "space.yaml"


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("--hos", "--host"),
        ("--hos=0.0.0.0", "--host"),
        ("--ho", "--host"),
        ("--po", "--port"),
        ("--model-p", "--model-path"),
        ("--mem-frac", "--mem-fraction-static"),
        ("--speculative-eagle", "--speculative-eagle-topk"),
        ("--tp-s", "--tp-size"),
    ],
)
def test_abbreviations_of_owned_flags_are_refused(tmp_path: Path, arg: str, flag: str) -> None:
    assert owned_flag(arg) is not None and owned_flag(arg)[0] == flag  # type: ignore[index]
    message, path = _refused(tmp_path, f"  extra_args: [--trust-remote-code, {arg}, '1']\n")
    line = (SPEC + "engine:\n").count("\n") + 1
    assert message.startswith(f"{path}:{line} (engine.extra_args[1])"), message
    assert f"argparse reads it as {flag}" in message


@pytest.mark.parametrize(
    "arg",
    ["--trust-remote-code", "--context-length", "--api-key", "--enable-metrics", "--log-level"],
)
def test_other_flags_pass(arg: str) -> None:
    assert owned_flag(arg) is None


def test_a_full_owned_flag_is_still_refused(tmp_path: Path) -> None:
    message, _ = _refused(tmp_path, "  extra_args: [--host, 0.0.0.0]\n")
    assert "extra_args sets --host, which autotune sets from engine.host" in message


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts(tmp_path: Path, host: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert is_loopback(host)
    space, _ = _load(tmp_path, f"  host: '{host}'\n")
    assert space.engine.host == host and not space.engine.expose
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.7", "gpu-box.example"])
def test_other_hosts_need_expose(tmp_path: Path, host: str) -> None:
    assert not is_loopback(host)
    message, path = _refused(tmp_path, f"  host: '{host}'\n")
    line = (SPEC + "engine:\n").count("\n") + 1
    assert message.startswith(f"{path}:{line} (engine.host)"), message
    assert "not a loopback address" in message and "expose: true" in message


def test_expose_allows_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space, path = _load(tmp_path, "  host: 0.0.0.0\n  expose: true\n")
    assert space.engine.host == "0.0.0.0" and space.engine.expose
    err = capsys.readouterr().err
    assert f"autotune: warning: {path}:" in err and "(engine.host)" in err
    assert "reachable from other machines" in err


def test_dashboard_on_all_interfaces_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    import optuna
    import optuna_dashboard

    from autotune.report._dashboard import serve_dashboard
    from autotune.server import find_free_port

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = tmp_path / "studies"
    studies.mkdir()
    optuna.create_study(study_name="d", storage=f"sqlite:///{studies / 'd.db'}")
    served: list[str] = []
    monkeypatch.setattr(optuna_dashboard, "run_server", lambda *a, **k: served.append(k["host"]))
    out = io.StringIO()
    free = find_free_port("127.0.0.1")  # (port 0 is refused: it would serve on a random port)
    for host in ("127.0.0.1", "0.0.0.0"):
        serve_dashboard(
            study_name="d",
            storage=None,
            studies_dir=studies,
            artifacts_dir=None,
            host=host,
            port=free,
            out=out,
        )
        err = capsys.readouterr().err
        if host == "0.0.0.0":
            assert "autotune: warning: --host 0.0.0.0" in err and "other machines" in err
        else:
            assert "warning" not in err
    assert served == ["127.0.0.1", "0.0.0.0"]
