"""What a study keeps of the space it was created with, each part where its reader looks.

* The space file's data as a normalised YAML dump (comments dropped, secrets and every
  ``engine.env`` value of a name not known to be safe redacted: :func:`redact_space_text`;
  the original text stays only in the user's file), in the study's system attribute
  :data:`SPACE_TEXT_KEY`: ``autotune study resume`` reads it back (without ``--space``) from the
  storage every worker shares, so a second machine joining a PostgreSQL study finds it too.
* The same text as a study artifact named after the file (``eagle3.yaml``): optuna-dashboard
  lists it under "Study Artifacts", where it can be read or downloaded.
* In the study's user attributes, which the dashboard shows as a table, only short references:
  the file's path, the artifact's id (:data:`STUDY_SPACE_ARTIFACT`) and the fingerprint.
* With a load mix, its points (label, weight, load) in the user attribute
  :data:`~autotune.study._record.STUDY_LOADS`, for the report.
* The objective's metric names, as Optuna's own metric names (``Study.set_metric_names``): the
  dashboard then titles its plots and columns ``output_tok_s`` rather than "Objective 0".

Studies created before keep the text in the user attribute ``autotune:space_text``
(:data:`~autotune.study._record.STUDY_SPACE_TEXT`) and have no metric names; both still open, and
:func:`stored_space_text` reads the old attribute where the system attribute is absent.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from autotune._errors import ConfigError
from autotune._redact import redact_space_text
from autotune.space import SearchSpace
from autotune.study._optuna import set_study_system_attr, study_system_attrs
from autotune.study._record import (
    STUDY_FINGERPRINT,
    STUDY_LOADS,
    STUDY_METRIC,
    STUDY_SPACE_SOURCE,
    STUDY_SPACE_TEXT,
)

if TYPE_CHECKING:
    import optuna
    from optuna.artifacts import FileSystemArtifactStore as ArtifactStore

#: The study system attribute that holds the space file's text (secrets redacted).
SPACE_TEXT_KEY = "autotune:space_text"
#: The study user attribute that names the space's artifact (its artifact id).
STUDY_SPACE_ARTIFACT = "autotune:space_artifact"

log = logging.getLogger("autotune.study")


def name_objectives(study: optuna.Study, names: Sequence[str]) -> None:
    """Give the study's objectives their metric names, one per direction, in order.

    Raises:
        ConfigError: not one name per objective, or a name twice.
    """
    names = [str(n) for n in names]
    if len(names) != len(study.directions):
        raise ConfigError(
            f"{len(names)} metric name(s) ({', '.join(names) or 'none'}) for a study of "
            f"{len(study.directions)} objective(s)",
            source="objective",
            hint="name one metric per objective",
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"a metric named twice: {', '.join(names)}", source="objective")
    if study.metric_names != names:
        import optuna.exceptions

        # experimental since Optuna 3.2; what the dashboard reads
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)


def store_space(study: optuna.Study, space: SearchSpace, store: ArtifactStore | None) -> None:
    """Record ``space`` in ``study``: its text, its artifact, its references; the fingerprint last
    (it says the rest is stored). Again on a study that has them: nothing is uploaded twice.

    ``store`` None, or an artifact folder that cannot be written: no artifact (logged); resume
    still reads the text from the system attribute.
    """
    source = Path(space.source)
    text = redact_space_text(source.read_text(encoding="utf-8")) if source.is_file() else ""
    # the text first: resume looks for it once the fingerprint says the space is stored
    set_study_system_attr(study, SPACE_TEXT_KEY, text)
    attrs: dict[str, object] = {
        STUDY_SPACE_SOURCE: str(source.resolve()) if source.exists() else space.source,
        STUDY_METRIC: space.objective.metric,
    }
    if space.objective.loads:
        attrs[STUDY_LOADS] = [
            {
                "label": p.label,
                "weight": p.weight,
                "concurrency": p.concurrency,
                "request_rate": p.request_rate,
            }
            for p in space.objective.loads
        ]
    if text and store is not None and STUDY_SPACE_ARTIFACT not in study.user_attrs:
        artifact_id = _upload_text(study, store, source.name, text)
        if artifact_id is not None:
            attrs[STUDY_SPACE_ARTIFACT] = artifact_id
    attrs[STUDY_FINGERPRINT] = space.fingerprint()
    for key, value in attrs.items():
        study.set_user_attr(key, value)


def stored_space_text(study: optuna.Study) -> str | None:
    """The space text the study was created with (secrets redacted); None when none is stored.

    The system attribute, else the user attribute of a study from an earlier version.
    """
    text = study_system_attrs(study).get(SPACE_TEXT_KEY)
    if isinstance(text, str):
        return text
    old = study.user_attrs.get(STUDY_SPACE_TEXT)
    return old if isinstance(old, str) else None


def _upload_text(study: optuna.Study, store: ArtifactStore, name: str, text: str) -> str | None:
    from optuna.artifacts import upload_artifact

    with tempfile.TemporaryDirectory(prefix="autotune-space-") as folder:
        path = Path(folder) / (name or "space.yaml")
        path.write_text(text, encoding="utf-8")
        try:
            return upload_artifact(
                artifact_store=store,
                file_path=str(path),
                study_or_trial=study,
                mimetype="text/plain",
                encoding="utf-8",
            )
        except OSError as e:
            log.warning("could not store the space file as a study artifact: %s", e)
            return None
