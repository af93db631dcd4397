"""The space's ``confirm`` section: defaults, off, settings, and located errors."""

from __future__ import annotations

import pytest

from autotune._errors import ConfigError
from autotune.space import ConfirmSpec, parse_space

HEAD = """\
name: c
engine: {tp_size: 1}
parameters:
  cuda_graph_max_bs: {choices: [64, 128]}
"""


def test_absent_means_on_with_the_defaults() -> None:
    space = parse_space(HEAD)
    assert space.confirm == ConfirmSpec()
    assert space.confirm.enabled and space.confirm.candidates == 3
    assert "confirm:    the best 3 and the baseline, interleaved" in space.summary()


def test_false_turns_it_off_and_a_mapping_sets_it() -> None:
    assert parse_space(HEAD + "confirm: false\n").confirm.enabled is False
    space = parse_space(
        HEAD + "confirm: {candidates: 2, min_rounds: 4, max_rounds: 6, confidence: 0.9}\n"
    )
    assert space.confirm == ConfirmSpec(True, 2, 4, 6, 0.9, 0.01)
    # the confirmation's settings do not make it another study
    assert space.fingerprint() == parse_space(HEAD).fingerprint()


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("confirm: {max_rounds: 2, min_rounds: 3}", "confirm.max_rounds", "below min_rounds"),
        ("confirm: {min_rounds: 1}", "confirm.min_rounds", "must be >= 2"),
        ("confirm: {confidence: 1.5}", "confirm.confidence", "<= 0.999"),
        ("confirm: {candidate: 2}", "confirm.candidate", "candidates"),
        ("confirm: yes please", "confirm", "must be a mapping"),
        ("confirm: {candidates: 0}", "confirm.candidates", "must be >= 1"),
    ],
)
def test_bad_settings_name_their_line_and_key(text: str, where: str, what: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_space(HEAD + text + "\n", source="s.yaml")
    message = str(caught.value)
    assert f"s.yaml:5 ({where})" in message, message
    assert what in message, message
