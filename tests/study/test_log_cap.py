"""Issue 42: a server whose log floods is stored capped (head and tail, with a marker line
that says what was left out), not 3-11 MB twice per trial; `logs classify` of a binary or
compressed file says so (it said "still starting")."""

from __future__ import annotations

import gzip
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.server import CUT_MARK, LOG_CAP_BYTES

from ._lab import CONFIGS, StudyLab, no_traceback

FLOOD_LINES = 120_000  # about 5 MB


def _flooding_python(lab: StudyLab) -> Path:
    """A "python" that writes ~5 MB to its output, then runs the real server."""
    script = lab.root / "flooding-python"
    script.write_text(
        "#!/bin/sh\n"
        f'"{sys.executable}" -c "import sys; w = sys.stdout.write\n'
        f"for i in range({FLOOD_LINES}):\n"
        "    w('warning: flood line %d of the server' % i + chr(10))\"\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_a_flooding_server_log_is_stored_capped(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("a server that floods its log (5 MB)")
    name = "flood"
    python = str(_flooding_python(lab))
    space = lab.space(name, baseline=False, configs=CONFIGS[:1], python=python, startup_s=240)
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "1")
    assert run.rc == 0, run.show()
    no_traceback(run)
    (trial,) = lab.finished(name)
    assert trial.user_attrs["outcome"] == "ok", trial.user_attrs

    artifacts = lab.studies / f"{name}-artifacts"
    log = artifacts / "trials" / "0000" / "server.log"
    text = log.read_text()
    assert len(text.encode()) <= LOG_CAP_BYTES + 512
    assert text.count(CUT_MARK) == 1
    assert text.startswith("warning: flood line 0 of the server\n")  # the head is kept
    assert "flood line 1 " in text.split(CUT_MARK)[0]
    assert f"flood line {FLOOD_LINES - 1} " not in text.split(CUT_MARK)[0]
    # every stored copy (the trial's folder, the study's artifacts) is within the cap
    sizes = {str(p): p.stat().st_size for p in artifacts.rglob("*") if p.is_file()}
    assert max(sizes.values()) <= LOG_CAP_BYTES + 512, sizes


@pytest.mark.parametrize("kind", ["binary", "gzip"])
def test_logs_classify_of_a_binary_file_says_so(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bad_input_tried: Callable[[str], None],
    kind: str,
) -> None:
    bad_input_tried(f"logs classify of a {kind} file")
    path = tmp_path / "server.log"
    text = b"The server is fired up and ready to roll!\n"
    path.write_bytes(os.urandom(4096) + b"\0" if kind == "binary" else gzip.compress(text * 50))
    code = main(["logs", "classify", str(path)])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert "category" not in out  # no reading of it as a log ("starting")
    assert str(path) in err and ("binary" in err or "gzip" in err), err
