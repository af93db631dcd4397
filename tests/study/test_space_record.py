"""What a study keeps of its space: the text where resume reads it, the file as a study artifact,
short references in the user attributes, the objective's metric names; and studies created
before (the text in a user attribute, no metric names) still resume, getting their names."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import optuna
import pytest
import yaml

from autotune._errors import ConfigError
from autotune.study._space_record import (
    SPACE_TEXT_KEY,
    STUDY_SPACE_ARTIFACT,
    name_objectives,
    stored_space_text,
)

from ._helpers import run_cli, small_space, start_study


def test_a_new_study_keeps_its_space_text_as_system_attr_and_artifact(tmp_path: Path) -> None:
    space = small_space(tmp_path)
    run = start_study(space, "kept", 1, tmp_path / "studies", "--no-informed")
    study = run.load()
    assert study.metric_names == ["output_tok_s"]
    assert "autotune:space_text" not in study.user_attrs
    text = stored_space_text(study)
    # the file's data as a normalised dump (its comments and layout are not kept)
    assert text is not None
    assert yaml.safe_load(text) == yaml.safe_load(space.read_text(encoding="utf-8"))
    artifact_id = study.user_attrs[STUDY_SPACE_ARTIFACT]
    assert (run.artifacts_dir / artifact_id).read_text(encoding="utf-8") == text
    (meta,) = optuna.artifacts.get_all_artifact_meta(study)
    assert (meta.artifact_id, meta.filename) == (artifact_id, space.name)
    assert max(len(json.dumps(v)) for v in study.user_attrs.values()) < 200


def test_a_study_of_the_old_layout_resumes_and_gets_its_metric_name(tmp_path: Path) -> None:
    space = small_space(tmp_path)
    run = start_study(space, "old", 1, tmp_path / "studies", "--no-informed")
    text = space.read_text(encoding="utf-8")
    # as earlier versions stored it: the text as a user attribute, no names, no artifact
    with sqlite3.connect(run.db) as db:
        db.execute(
            "DELETE FROM study_system_attributes WHERE key IN (?, ?)",
            (SPACE_TEXT_KEY, "study:metric_names"),
        )
        db.execute("DELETE FROM study_user_attributes WHERE key = ?", (STUDY_SPACE_ARTIFACT,))
        db.execute(
            "INSERT INTO study_user_attributes (study_id, key, value_json) VALUES (1, ?, ?)",
            ("autotune:space_text", json.dumps(text)),
        )
    space.unlink()  # resume must take the space from the study
    old = run.load()
    assert old.metric_names is None and stored_space_text(old) == text

    resumed = run_cli("study", "resume", *run.cli_args(), "--n-trials", "1", "--no-progress")
    assert resumed.returncode == 0, resumed.describe()
    assert "Traceback" not in resumed.stderr
    study = run.load()
    assert study.metric_names == ["output_tok_s"]
    assert len(study.trials) >= 2


def test_metric_names_must_match_the_objectives() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    name_objectives(study, ["output_tok_s", "itl_p99_ms"])
    assert study.metric_names == ["output_tok_s", "itl_p99_ms"]
    with pytest.raises(ConfigError, match="1 metric name"):
        name_objectives(study, ["output_tok_s"])
    with pytest.raises(ConfigError, match="named twice"):
        name_objectives(study, ["output_tok_s", "output_tok_s"])
