"""Secrets planted in a space file are used (the probe and the benchmark authenticate) but never
stored or served: not in the database, the artifacts, the logs, the report or the dashboard.
And what the server may listen on: loopback unless the space says ``engine.expose: true``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from ._lab import StudyLab, free_port, no_traceback

API_KEY = "PLANTEDapikey7f3a9c"
SECRETS = {
    "api key": API_KEY,
    "HF_TOKEN": "PLANTEDhftoken1b2c3d",
    "HUGGING_FACE_HUB_TOKEN": "PLANTEDhubtoken77aa",
    "OPENAI_KEY": "PLANTEDopenai4e5f",
    "DB_PASS": "PLANTEDdbpass9a8b",
    "URL password": "PLANTEDurlpw5566",
}


def _secret_space(lab: StudyLab, name: str = "sec", **engine: object) -> Path:
    path = lab.space(name)
    data = yaml.safe_load(path.read_text())
    data["engine"]["extra_args"] = [
        "--api-key",
        API_KEY,
        "--tokenizer-path",
        f"https://alice:{SECRETS['URL password']}@hub.example/tok",
    ]
    data["engine"]["env"] = {
        k: v for k, v in SECRETS.items() if k.isupper() and k.replace("_", "").isalpha()
    }
    data["engine"].update(engine)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _leaks(blob: bytes | str, where: str) -> list[str]:
    data = blob.encode() if isinstance(blob, str) else blob
    return [f"{what} in {where}" for what, value in SECRETS.items() if value.encode() in data]


def _leaks_in_tree(root: Path, skip: set[Path]) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and path not in skip:
            found += _leaks(path.read_bytes(), str(path.relative_to(root)))
    return found


def _dashboard_pages(lab: StudyLab, name: str) -> dict[str, bytes]:
    """Every JSON page and artifact optuna-dashboard serves for the study, by its path."""
    port = free_port()
    proc = lab.spawn("dashboard", "--study-name", name, "--port", str(port), log="dashboard")
    base = f"http://127.0.0.1:{port}"
    pages: dict[str, bytes] = {}
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (lab.root / "dashboard.err").read_text()
            try:
                if httpx.get(f"{base}/api/meta", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the dashboard did not answer within 60 s"
            time.sleep(0.2)
        listed = httpx.get(f"{base}/api/studies", timeout=10)
        pages["/api/studies"] = listed.content
        for summary in listed.json()["study_summaries"]:
            sid = summary["study_id"]
            detail = httpx.get(f"{base}/api/studies/{sid}", timeout=30)
            pages[f"/api/studies/{sid}"] = detail.content
            for trial in detail.json()["trials"]:
                for art in trial.get("artifacts", []):
                    url = f"/artifacts/{sid}/{trial['trial_id']}/{art['artifact_id']}"
                    pages[url] = httpx.get(base + url, timeout=10).content
            for extra in (f"/api/studies/{sid}/param_importances", "/api/meta"):
                pages[extra] = httpx.get(base + extra, timeout=30).content
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return pages


def test_planted_secrets_are_used_but_never_stored_or_served(lab: StudyLab) -> None:
    space = _secret_space(lab)
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "2")
    assert run.rc == 0, run.show()
    no_traceback(run)
    trials = lab.finished("sec")
    assert len(trials) == 2
    # the probe and the benchmark sent the key: with a 401 every trial would time out
    assert [t.user_attrs["outcome"] for t in trials] == ["ok", "ok"], run.show()
    command = trials[0].user_attrs["command"]
    assert "--api-key '***'" in command and "HF_TOKEN='***'" in command
    assert "https://alice:***@hub.example/tok" in command

    report = lab.cli("study", "report", "--study-name", "sec")
    as_json = lab.cli("study", "report", "--study-name", "sec", "--json")
    assert report.rc == 0 and as_json.rc == 0, report.show() + as_json.show()
    assert json.loads(as_json.out)["best_command"]
    status = lab.cli("study", "status", "--study-name", "sec")

    leaks = _leaks_in_tree(lab.studies, skip=set())  # database (+ WAL), artifacts, logs
    leaks += _leaks_in_tree(lab.root, skip={space, *lab.studies.rglob("*")})
    for done in (run, report, as_json, status):
        leaks += _leaks(done.text, f"`autotune {' '.join(done.args[:2])}` output")
    pages = _dashboard_pages(lab, "sec")
    assert any("/artifacts/" in p for p in pages), "the dashboard listed no artifacts"
    for path, body in pages.items():
        leaks += _leaks(body, f"dashboard {path}")
    assert (lab.studies / "sec.db").exists() and list((lab.studies / "sec-logs").iterdir())
    assert not leaks, leaks


def test_resume_takes_the_secrets_back(lab: StudyLab) -> None:
    space = _secret_space(lab)
    assert lab.cli("study", "start", "--space", str(space), "--n-trials", "1").rc == 0
    # the space file is still there, unchanged: its secrets are used again
    run = lab.cli("study", "resume", "--study-name", "sec", "--n-trials", "1")
    assert run.rc == 0, run.show()
    assert [t.user_attrs["outcome"] for t in lab.finished("sec")] == ["ok", "ok"]

    # gone: the secrets it had are named, with where to give them
    space.rename(space.with_suffix(".moved"))
    run = lab.cli("study", "resume", "--study-name", "sec", "--n-trials", "1")
    assert run.rc != 0
    no_traceback(run)
    assert "engine.env.HF_TOKEN (set HF_TOKEN in the environment)" in run.err, run.show()
    assert "AUTOTUNE_API_KEY" in run.err and "--space FILE" in run.err
    assert not _leaks(run.text, "the refusal")

    # the file given again: works
    run = lab.cli(
        "study", "resume", "--study-name", "sec", "--n-trials", "1",
        "--space", str(space.with_suffix(".moved")),
    )  # fmt: skip
    assert run.rc == 0, run.show()
    assert [t.user_attrs["outcome"] for t in lab.finished("sec")] == ["ok"] * 3
    assert not _leaks_in_tree(lab.studies, skip=set())


@pytest.mark.parametrize(
    ("case", "args", "phrase"),
    [
        ("extra_args --hos 0.0.0.0", ["--hos", "0.0.0.0"], "(argparse reads it as --host)"),
        ("extra_args --hos=0.0.0.0", ["--hos=0.0.0.0"], "(argparse reads it as --host)"),
        ("extra_args --po 1", ["--po", "1"], "(argparse reads it as --port)"),
    ],
)
def test_abbreviated_owned_flags_are_refused(
    lab: StudyLab,
    bad_input_tried: Callable[[str], None],
    case: str,
    args: list[str],
    phrase: str,
) -> None:
    bad_input_tried(case)
    path = lab.space("abbrev")
    data = yaml.safe_load(path.read_text())
    data["engine"]["extra_args"] = args
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    for command in (["space", "check", str(path)], ["study", "start", "--space", str(path)]):
        run = lab.cli(*command)
        assert run.rc == 2, run.show()
        no_traceback(run)
        assert f"{path}:" in run.err and "(engine.extra_args[0])" in run.err, run.show()
        assert phrase in run.err
    assert not (lab.studies / "abbrev.db").exists()


def test_all_interfaces_need_expose(lab: StudyLab, bad_input_tried: Callable[[str], None]) -> None:
    bad_input_tried("engine.host 0.0.0.0 without engine.expose")
    path = lab.space("open")
    data = yaml.safe_load(path.read_text())
    data["engine"]["host"] = "0.0.0.0"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run = lab.cli("study", "start", "--space", str(path), "--n-trials", "1")
    assert run.rc == 2, run.show()
    no_traceback(run)
    assert f"{path}:" in run.err and "(engine.host)" in run.err
    assert "not a loopback address" in run.err and "expose: true" in run.err
    assert not (lab.studies / "open.db").exists()

    data["engine"]["expose"] = True
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run = lab.cli("space", "check", str(path))
    assert run.rc == 0, run.show()
    assert "autotune: warning:" in run.err and "(engine.host)" in run.err
    assert "reachable from other machines" in run.err


# --- issue 42: default-deny of the space's environment, comments, URL passwords in logs ------

#: Planted where a user would: an env var of an unknown name (a GitHub token), one whose value
#: no pattern recognises, and a token in a commented-out line.
UNKNOWN = {
    "GITHUB_PAT": "ghp_PLANTEDgithub0a1b2c3d4e5f",
    "MY_SETTING": "PLANTEDplainvalue42",
    "commented HF_TOKEN": "hf_PLANTEDcommented9z8y7x",
}


def _unknown_env_space(lab: StudyLab) -> Path:
    path = lab.space("pat")
    data = yaml.safe_load(path.read_text())
    data["engine"]["env"] = {
        "GITHUB_PAT": UNKNOWN["GITHUB_PAT"],
        "MY_SETTING": UNKNOWN["MY_SETTING"],
        "NCCL_DEBUG": "WARN",  # data: kept
    }
    text = yaml.safe_dump(data, sort_keys=False).replace(
        "  env:\n", f"  env:\n    # HF_TOKEN: {UNKNOWN['commented HF_TOKEN']}\n", 1
    )
    path.write_text(text + f"# HF_TOKEN: {UNKNOWN['commented HF_TOKEN']}\n")
    assert text.count("HF_TOKEN") == 1  # (the comment went in)
    return path


def _planted(blob: bytes | str, where: str) -> list[str]:
    data = blob.encode() if isinstance(blob, str) else blob
    return [f"{what} in {where}" for what, value in UNKNOWN.items() if value.encode() in data]


def test_env_values_of_unknown_names_and_comments_are_never_stored(lab: StudyLab) -> None:
    import optuna

    space = _unknown_env_space(lab)
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "1")
    assert run.rc == 0, run.show()
    no_traceback(run)
    (trial,) = lab.finished("pat")
    assert trial.user_attrs["outcome"] == "ok", run.show()
    command = trial.user_attrs["command"]
    assert "GITHUB_PAT='***'" in command and "MY_SETTING='***'" in command, command
    assert "NCCL_DEBUG=WARN" in command, command  # a safe name keeps its value

    storage = lab.storage(lab.sqlite_url("pat"))
    study = optuna.load_study(study_name="pat", storage=storage)
    system_attrs = storage.get_study_system_attrs(storage.get_study_id_from_name("pat"))
    stored = system_attrs["autotune:space_text"]
    assert "#" not in stored  # comments dropped: a normalised dump
    assert yaml.safe_load(stored)["engine"]["env"] == {
        "GITHUB_PAT": "<redacted>",
        "MY_SETTING": "<redacted>",
        "NCCL_DEBUG": "WARN",
    }
    leaks = _planted(json.dumps([study.user_attrs, system_attrs]), "study attributes")
    leaks += _planted(json.dumps([trial.user_attrs, trial.system_attrs]), "trial attributes")

    as_json = lab.cli("study", "report", "--study-name", "pat", "--json")
    report = lab.cli("study", "report", "--study-name", "pat")
    assert as_json.rc == 0 and report.rc == 0, as_json.show() + report.show()
    for done in (run, as_json, report):
        leaks += _planted(done.text, f"`autotune {' '.join(done.args[:2])}` output")
    db_files = sorted(lab.studies.glob("pat.db*"))  # the database, its WAL
    artifact = lab.studies / "pat-artifacts" / study.user_attrs["autotune:space_artifact"]
    assert db_files and "<redacted>" in artifact.read_text()
    # the study resumes with the values from its unchanged file
    again = lab.cli("study", "resume", "--study-name", "pat", "--n-trials", "1")
    assert again.rc == 0, again.show()
    assert [t.user_attrs["outcome"] for t in lab.finished("pat")] == ["ok", "ok"]
    leaks += _planted(again.text, "`autotune study resume` output")

    # last (closing a file of the database drops this process's SQLite locks on it)
    for path in sorted(lab.studies.rglob("*")):  # database, artifacts (the space too), logs
        if path.is_file():
            leaks += _planted(path.read_bytes(), str(path.relative_to(lab.root)))
    assert not leaks, leaks


def test_the_debug_log_never_holds_a_url_password(tmp_path: Path) -> None:
    """Every line of the debug log goes through the redaction, the first one (the storage URL)
    included; with AUTOTUNE_TEST_POSTGRES_URL, test_postgres.py also checks a real study's."""
    import logging

    from autotune._redact import redact_url
    from autotune.study._progress import close_debug_log, open_debug_log

    url = "postgresql://u:secretpw@db.example:5432/studies"
    path = open_debug_log(tmp_path)
    try:
        logger = logging.getLogger("autotune.study")
        logger.info("study %s on %s, %s", "s", url, "sim")  # as the runner's first line, raw
        logger.warning("cannot reach %s: connection refused", url)
    finally:
        close_debug_log(path)
    text = path.read_text()
    assert "secretpw" not in text and text.count("postgresql://u:***@db.example") == 2, text
    assert redact_url(url) == "postgresql://u:***@db.example:5432/studies"
