"""The survey (``--sampler survey``): trials added to a study where the twin knows least, so that
the twin ``autotune twin export`` writes predicts the box where the search never went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from autotune.cli._twin_study import DEFAULT_ERRORS, check_twin
from autotune.space import load_space
from autotune.study import choose_sampler
from autotune.study._choice import build_sampler
from autotune.study._twin_sampler import (
    PROBES,
    SURE_CRASH,
    SURVEY_SPREAD,
    TwinPlan,
    TwinSampler,
    _spread,
)
from autotune.study._twin_trials import twin_facts
from autotune.twin._prediction import TwinPrediction

from ._lab import CONFIGS, StudyLab, no_traceback

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ROOT = Path(__file__).resolve().parents[2]
SEED_BOX = ROOT / "search_spaces" / "eagle3.yaml"
RTX4090 = ROOT / "search_spaces" / "eagle3-rtx4090.yaml"


def test_the_spread_is_the_particles_relative_spread_over_those_that_start() -> None:
    samples = np.array(
        [[100.0, 50.0, np.nan], [110.0, 50.0, np.nan], [np.nan, 50.0, np.nan], [90.0, 50.0, 7.0]]
    )
    weights = np.full(4, 0.25)
    spread = _spread(samples, weights)
    # three of four particles start the first: std 8.165 over mean 100, times 3/4
    assert spread[0] == pytest.approx(np.sqrt(200 / 3) / 100 * 0.75)
    assert spread[1] == 0.0  # every particle agrees
    assert spread[2] == 0.0  # one particle: no spread
    weighted = _spread(samples[:, :1], np.array([0.5, 0.1, 0.3, 0.1]))
    mean = (0.5 * 100 + 0.1 * 110 + 0.1 * 90) / 0.7
    var = (0.5 * (100 - mean) ** 2 + 0.1 * (110 - mean) ** 2 + 0.1 * (90 - mean) ** 2) / 0.7
    assert weighted[0] == pytest.approx(np.sqrt(var) / mean * 0.7)


def test_a_survey_stops_once_the_twin_knows_every_untried_combination() -> None:
    survey = TwinSampler.__new__(TwinSampler)
    plan = TwinPlan((({}, 0.0, None),), 100.0, 101.0, 0.0, (), 2 * SURVEY_SPREAD)
    assert survey._surveyed(plan) is None
    known = TwinPlan((({}, 0.0, None),), 100.0, 101.0, 0.0, (), SURVEY_SPREAD / 2)
    why = survey._surveyed(known)
    assert why is not None and "widest spread of its belief: 0.5%" in why
    assert choose_sampler("survey", conditional=False).name == "survey"
    # the values known, but the twin may misjudge the start of 2% of the space: go on
    edge = TwinPlan((({}, 0.0, None),), 100.0, 101.0, 0.0, (), SURVEY_SPREAD / 2, 0.02)
    assert survey._surveyed(edge) is None
    both = TwinPlan((({}, 0.0, None),), 100.0, 101.0, 0.0, (), SURVEY_SPREAD / 2, 0.004)
    why = survey._surveyed(both)
    assert why is not None and "misjudge the start of 0.4% of the configurations that" in why


class _Probed:
    """A twin's prediction at four probes, as :meth:`TwinSampler._unknowns` reads it."""

    def __init__(self, odds: list[float], samples: np.ndarray) -> None:
        self.odds, self.samples = np.array(odds), samples

    def predict(self, configs: list[Any]) -> TwinPrediction:
        assert len(configs) == len(self.odds)
        weights = np.full(len(self.samples), 1.0 / len(self.samples))
        return TwinPrediction(self.samples, weights, self.odds, [None] * len(self.odds))


def test_the_survey_weighs_its_unknowns_over_the_configurations_that_may_start() -> None:
    """Two of four probes crash for certain; they count for none. Of the two that may start,
    one is an even bet (0.5 misjudged, 0.5 expected to start), one starts for sure: 0.5 of the
    1.5 expected starts is misjudged (not an eighth, as over all four), and the values' spread
    is over those 1.5 alone."""
    nan = np.nan
    samples = np.array(
        [[nan, nan, 100.0, 100.0], [nan, nan, 120.0, 100.0],
         [nan, nan, nan, 100.0], [nan, nan, nan, 100.0]]
    )  # fmt: skip
    survey = TwinSampler.__new__(TwinSampler)
    survey._probes = [object()] * 4
    survey.twin = _Probed([1.0, 1.0, 0.5, 0.0], samples)  # type: ignore[assignment]
    misjudged, typical = survey._unknowns()
    assert misjudged == pytest.approx(1 / 3)
    # the even bet's spread: std 10 over mean 110, times the half that start it, over 1.5 starts
    assert typical == pytest.approx(10 / 110 * 0.5 / 1.5 * np.sqrt(2 / np.pi))
    survey.twin = _Probed([1.0, 1.0, 1.0, 1.0], samples)  # type: ignore[assignment]
    assert survey._unknowns() == (0.0, 0.0)


def test_the_survey_probes_configurations_the_twin_does_not_hold_to_crash() -> None:
    """Most random configurations of the seed box's space crash for certain (weights and KV
    pool do not fit at a low memory share, or the graphs do not at a high one); the survey's
    probes are drawn among the rest, so its shares rest on all of them."""
    space = load_space(SEED_BOX)
    survey = build_sampler(
        "survey", space, None, seed=0, constraints=lambda t: (), facts=twin_facts(space, None)
    )
    assert isinstance(survey, TwinSampler)
    plain = [space.config_for(p) for p in space.sample(PROBES, seed=1)]
    assert np.mean(survey.twin.predict(plain).crash_probability >= SURE_CRASH) > 0.5
    probes = survey._draw_probes()
    assert len(probes) == PROBES
    assert (survey.twin.predict(probes).crash_probability < SURE_CRASH).all()


def test_a_survey_makes_the_exported_twin_predict_where_the_search_never_went() -> None:
    """The seed box: the twin's own search measures few top-k values and one all-reduce mode;
    eight survey trials measure the rest, and the export's errors at 20 random feasible
    configurations fall (the twin search alone: median 4.5%, max 11.3%; with the survey:
    median 1.0%, the largest value error 2.7%). One start of the 20, where the twin's crash
    odds are near even (58%), is predicted to crash: the memory edge is the other test's."""
    wrong = dict(DEFAULT_ERRORS)  # the prior's centre off, as `autotune twin check` makes it
    alone = check_twin(str(SEED_BOX), sampler="twin", seed=0, errors=wrong)
    surveyed = check_twin(str(SEED_BOX), sampler="twin", seed=0, errors=wrong, survey=8)
    assert surveyed.surveyed == 8 and surveyed.trials == alone.trials + 8
    before, after = np.abs(alone.errors), np.abs(surveyed.errors)
    assert sum(bool(b) for b in alone.beyond) >= 10
    assert sum(bool(b) for b in surveyed.beyond) <= 2
    assert np.median(after) < 0.6 * np.median(before)
    assert int((before > 0.5).sum()) == 0 and int((after > 0.5).sum()) <= 1
    assert after[after <= 0.5].max() < 0.06 < before.max()
    lines = "\n".join(surveyed.lines())
    assert "a study of" in lines and "the last 8 a survey" in lines


def test_a_survey_probes_the_crash_edge_the_search_never_went_near() -> None:
    """RTX 4090: the twin's search sets the memory knobs at their safest, so its twin knows
    only a bound of the activation workspace and predicts a CUDA-graph crash at 6 of 100
    random configurations that start (a 100% error each). The survey sees that the twin may
    misjudge the start of more of the space than its values' spread and probes the edge, at
    the memory knobs where the twin's crash odds are near even; afterwards no start of the 100
    is misjudged (at most one allowed) and every other error is under 5%."""
    wrong = dict(DEFAULT_ERRORS)
    alone = check_twin(str(RTX4090), sampler="twin", seed=3, errors=wrong, configs=100)
    surveyed = check_twin(str(RTX4090), sampler="twin", seed=3, errors=wrong, survey=8, configs=100)
    before, after = np.abs(alone.errors), np.abs(surveyed.errors)
    assert int((before > 0.5).sum()) >= 3  # starts predicted to crash
    assert surveyed.surveyed == 8
    assert int((after > 0.5).sum()) <= 1
    assert after[after <= 0.5].max() < 0.05


def _params(lab: StudyLab, name: str) -> list[dict[str, Any]]:
    study = optuna.load_study(study_name=name, storage=lab.storage(lab.sqlite_url(name)))
    return [dict(t.params) for t in study.trials]


def test_resume_with_the_survey_adds_new_combinations_and_confirms_only_when_asked(
    lab: StudyLab,
) -> None:
    confirm = {"candidates": 2, "min_rounds": 2, "max_rounds": 2}
    space = lab.space("surv", configs=CONFIGS[:2], confirm=confirm)
    run = lab.cli(
        "study", "start", "--space", str(space), "--n-trials", "3", "--no-confirm", "--seed", "1"
    )
    assert run.rc == 0, run.show()
    before = _params(lab, "surv")
    more = lab.cli(
        "study", "resume", "--study-name", "surv", "--sampler", "survey", "--n-trials", "2"
    )
    assert more.rc == 0, more.show()
    no_traceback(more)
    assert "5 of 5 trials finished" in more.out, more.show()
    after = _params(lab, "surv")
    assert after[: len(before)] == before
    keys = {"speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"}
    combos = [tuple(sorted((k, v) for k, v in p.items() if k in keys)) for p in after if p]
    assert len(combos) == len(set(combos)), after  # nothing measured twice
    study = optuna.load_study(study_name="surv", storage=lab.storage(lab.sqlite_url("surv")))
    assert "autotune:confirmation" not in study.user_attrs  # the space confirms; a survey not
    log = "\n".join(p.read_text(errors="replace") for p in lab.root.rglob("*.log"))
    assert "sampler: TwinSampler (aim: survey)" in log
    assert log.count("twin survey: least known untried") >= 2
