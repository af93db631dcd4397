"""Issue 42: options that escaped as a traceback, hung, or blamed a key of the space file the
user never wrote. Each is refused with exit code 2 and a message that names the option typed,
through the command line's entry point (``autotune.cli.main``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.cli import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    text = out + err
    assert "Traceback" not in text and "OverflowError" not in text, text
    return code, err


@pytest.mark.parametrize("port", ["99999", "-1", "65536", "0"])
def test_dashboard_port_out_of_range(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bad_input_tried: Callable[[str], None],
    port: str,
) -> None:
    bad_input_tried(f"dashboard --port {port}")
    (tmp_path / "s.db").touch()
    code, err = _run(
        capsys, "dashboard", "--study-name", "s", "--studies-dir", str(tmp_path), "--port", port
    )
    assert code == 2, err
    assert "--port" in err and port in err and "engine." not in err, err


@pytest.mark.parametrize("host", ["999.1.1.1", "203.0.113.7"])
def test_dashboard_host_is_named_as_the_option(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bad_input_tried: Callable[[str], None],
    host: str,
) -> None:
    """Not resolvable, or not an address of this machine: ``--host``, never ``engine.host``."""
    bad_input_tried(f"dashboard --host {host}")
    (tmp_path / "s.db").touch()
    code, err = _run(
        capsys, "dashboard", "--study-name", "s", "--studies-dir", str(tmp_path),
        "--host", host, "--port", "18080",
    )  # fmt: skip
    assert code == 2, err
    assert "--host" in err and host in err and "engine.host" not in err, err


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize(
    "command",
    [
        ("study", "start", "--space", "{fifo}", "--studies-dir", "{dir}"),
        ("study", "resume", "--study-name", "s", "--space", "{fifo}", "--studies-dir", "{dir}"),
        ("space", "check", "{fifo}"),
    ],
    ids=["start", "resume", "space-check"],
)
def test_a_fifo_as_the_space_is_refused_not_read(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bad_input_tried: Callable[[str], None],
    command: tuple[str, ...],
) -> None:
    """Reading a FIFO waits for a writer forever: it is refused as not a regular file."""
    bad_input_tried(f"{' '.join(command[:2])} with a FIFO as the space")
    fifo = tmp_path / "space.yaml"
    os.mkfifo(fifo)
    args = [a.format(fifo=fifo, dir=tmp_path / "studies") for a in command]
    code, err = _run(capsys, *args)
    assert code == 2, err
    assert "FIFO" in err and "not a regular file" in err, err
    if "--space" in args:
        assert "--space" in err, err
    assert not (tmp_path / "studies").exists()  # refused before anything was created


def test_a_device_as_the_space_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not Path("/dev/null").exists():
        pytest.skip("no /dev/null")
    code, err = _run(capsys, "study", "start", "--space", "/dev/null")
    assert code == 2 and "--space" in err and "character device" in err, err


def test_logs_classify_names_the_engine_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad_input_tried: Callable[[str], None]
) -> None:
    bad_input_tried("logs classify --engine sglan")
    log = tmp_path / "server.log"
    log.write_text("The server is fired up and ready to roll!\n")
    code, err = _run(capsys, "logs", "classify", str(log), "--engine", "sglan")
    assert code == 2, err
    assert "--engine" in err and "'sglan'" in err and "engine.kind" not in err, err
    assert "sglang" in err  # the kinds to choose from
