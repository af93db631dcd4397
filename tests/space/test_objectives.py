"""Several objectives, latency limits and goodput's per-request limits in a space file."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune._errors import ConfigError
from autotune._slo import RequestLimits
from autotune.space import METRICS, load_space

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
BASE = (SPACES / "eagle3-h100.yaml").read_text(encoding="utf-8")
OBJECTIVE = "objective:\n  metric: output_tok_s\n"


def _space(tmp_path: Path, objective: str) -> Path:
    assert OBJECTIVE in BASE
    path = tmp_path / "space.yaml"
    path.write_text(BASE.replace(OBJECTIVE, objective), encoding="utf-8")
    return path


def _refused(tmp_path: Path, objective: str) -> tuple[ConfigError, str]:
    path = _space(tmp_path, objective)
    with pytest.raises(ConfigError) as info:
        load_space(path)
    return info.value, path.read_text(encoding="utf-8")


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_every_latency_figure_of_bench_serving_and_goodput_may_be_named() -> None:
    for family in ("ttft", "tpot", "itl", "e2e"):
        for stat in ("mean", "median", "p90", "p99"):
            assert METRICS[f"{family}_{stat}_ms"] == "minimize"
    assert METRICS["goodput"] == "maximize"


def test_two_metrics_take_their_directions_from_metrics(tmp_path: Path) -> None:
    space = load_space(_space(tmp_path, "objective:\n  metrics: [output_tok_s, tpot_p99_ms]\n"))
    obj = space.objective
    assert obj.multi
    assert obj.metrics == ("output_tok_s", "tpot_p99_ms")
    assert obj.directions == ("maximize", "minimize")
    assert (obj.metric, obj.direction) == ("output_tok_s", "maximize")
    assert "maximize output_tok_s, minimize tpot_p99_ms (a Pareto front" in space.summary()


def test_directions_may_be_given(tmp_path: Path) -> None:
    space = load_space(
        _space(
            tmp_path,
            "objective:\n  metrics: [accept_length, itl_p99_ms]\n"
            "  directions: [minimize, maximize]\n",
        )
    )
    assert space.objective.directions == ("minimize", "maximize")


def test_a_single_objective_space_is_unchanged(tmp_path: Path) -> None:
    space = load_space(SPACES / "eagle3-h100.yaml")
    obj = space.objective
    assert not obj.multi and obj.metrics == ("output_tok_s",) and obj.slo is None
    # the fingerprint hashes the objective as before several objectives existed, so a study
    # started by an earlier version resumes
    assert set(obj.fingerprint_body()) == {"metric", "direction", "score", "mad_k", "constraints"}
    two = load_space(_space(tmp_path, "objective:\n  metrics: [output_tok_s, tpot_p99_ms]\n"))
    assert two.fingerprint() != space.fingerprint()


def test_slo_gives_goodput_its_limits(tmp_path: Path) -> None:
    space = load_space(
        _space(
            tmp_path,
            "objective:\n  metric: goodput\n  slo: {ttft_ms: 200, tpot_ms: 5}\n"
            "  constraints:\n    - {metric: tpot_p99_ms, max: 50}\n",
        )
    )
    obj = space.objective
    assert obj.slo == RequestLimits(ttft_ms=200.0, tpot_ms=5.0)
    assert obj.direction == "maximize"
    assert obj.constraints[0].metric == "tpot_p99_ms" and obj.constraints[0].max == 50
    assert "goodput counts the requests within TTFT <= 200 ms, TPOT <= 5 ms" in space.summary()


@pytest.mark.parametrize(
    ("objective", "needle", "key", "message"),
    [
        (
            "objective:\n  metrics: [output_tok_s, tpot_p999_ms]\n",
            "tpot_p999_ms",
            "objective.metrics[1]",
            "unknown metric 'tpot_p999_ms'",
        ),
        (
            "objective:\n  metric: output_tok_s\n  metrics: [output_tok_s, tpot_p99_ms]\n",
            "metric: output_tok_s",
            "objective.metric",
            "give either metric or metrics, not both",
        ),
        (
            "objective:\n  metrics: [output_tok_s, tpot_p99_ms]\n  directions: [maximize]\n",
            "directions",
            "objective.directions",
            "directions must be a list of 2",
        ),
        (
            "objective:\n  metrics: [output_tok_s, tpot_p99_ms]\n  directions: [up, down]\n",
            "directions",
            "objective.directions[0]",
            "direction 'up' is not allowed",
        ),
        (
            "objective:\n  metrics: [output_tok_s, output_tok_s]\n",
            "metrics",
            "objective.metrics[1]",
            "output_tok_s is listed twice",
        ),
        ("objective:\n  metric: goodput\n", "goodput", "objective.metric", "needs the per-request"),
        (
            "objective:\n  metric: output_tok_s\n  slo: {ttft_ms: 200, tpot: 5}\n",
            "slo",
            "objective.slo.tpot",
            "tpot",
        ),
        (
            "objective:\n  metric: output_tok_s\n  slo: {ttft_ms: -3}\n",
            "slo",
            "objective.slo.ttft_ms",
            "ttft_ms",
        ),
        (
            "objective:\n  metric: output_tok_s\n  constraints:\n    - {metric: goodput, min: 1}\n",
            "goodput",
            "objective.constraints[0].metric",
            "needs the per-request limits objective.slo",
        ),
    ],
)
def test_mistakes_are_named_with_their_line_and_key(
    tmp_path: Path, objective: str, needle: str, key: str, message: str
) -> None:
    error, text = _refused(tmp_path, objective)
    where = f"space.yaml:{_line(text, needle)} ({key})"
    assert where in str(error), str(error)
    assert message in str(error), str(error)
