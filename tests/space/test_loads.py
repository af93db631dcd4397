"""``objective.loads``: a load mix read from a space file, and every refusal located."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune._errors import ConfigError
from autotune.space import LoadPoint, load_space, parse_space

REPO = Path(__file__).resolve().parents[2]

SPEC = """\
workload:
  num_prompts: 8
  concurrency: 2
fixed:
  speculative_algorithm: EAGLE3
parameters:
  speculative_num_steps: {type: int, low: 1, high: 4}
  speculative_eagle_topk: {type: categorical, choices: [1, 2, 4]}
  speculative_num_draft_tokens: {type: int, low: 2, high: 8}
objective:
  metric: output_tok_s
"""


def _with_loads(body: str) -> str:
    return SPEC + body


def _refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_space(path)
    assert info.value.exit_code == 2
    return str(info.value)


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_mix_of_concurrencies_and_rates_is_read_with_labels_and_weights() -> None:
    space = parse_space(
        _with_loads(
            "  loads:\n"
            "    - {concurrency: 1, weight: 0.5}\n"
            "    - {concurrency: 16, weight: 0.25, num_prompts: 40}\n"
            "    - {request_rate: 2.5, weight: 0.125}\n"
            "    - {request_rate: 4, concurrency: 8, weight: 0.125}\n"
        )
    )
    loads = space.objective.loads
    assert [p.label for p in loads] == ["c1", "c16", "r2.5", "r4c8"]
    assert [p.weight for p in loads] == [0.5, 0.25, 0.125, 0.125]
    base = space.workload
    c1, c16, rate, capped = (p.workload(base) for p in loads)
    # a concurrency point measures two prompts per slot at least, or its own count
    assert (c1.concurrency, c1.request_rate, c1.num_prompts) == (1, None, 8)
    assert (c16.concurrency, c16.num_prompts) == (16, 40)
    assert LoadPoint(1.0, 64).workload(base).num_prompts == 128
    # a rate without a cap lets every prompt be in flight; with one, at most that many
    assert (rate.request_rate, rate.concurrency) == (2.5, base.num_prompts)
    assert (capped.request_rate, capped.concurrency) == (4.0, 8)
    # everything else is the workload's
    assert c16.input_len == base.input_len and c16.seed == base.seed
    assert space.objective.weighted({"c1": 100, "c16": 200, "r2.5": 40, "r4c8": 80}) == (
        pytest.approx(0.5 * 100 + 0.25 * 200 + 0.125 * 40 + 0.125 * 80)
    )
    assert space.objective.weighted({"c1": 100}) is None  # a point without a figure
    assert "weighted over the load mix c1 0.5, c16 0.25" in space.summary()


def test_without_loads_the_space_and_its_fingerprint_are_as_before() -> None:
    plain = parse_space(SPEC)
    assert plain.objective.loads == ()
    # the fingerprint of a space without a mix does not mention loads: studies resume
    assert plain.fingerprint() == parse_space(SPEC + "  direction: maximize\n").fingerprint()
    mixed = parse_space(_with_loads("  loads: [{concurrency: 1, weight: 1}]\n"))
    assert mixed.fingerprint() != plain.fingerprint()
    shipped = load_space(REPO / "search_spaces" / "eagle3-h100-mix.yaml")
    assert [(p.label, p.weight) for p in shipped.objective.loads] == [
        ("c1", 0.5),
        ("c16", 0.3),
        ("c64", 0.2),
    ]


# (loads text, text of the offending line, key path, part of the message)
CASES = [
    pytest.param("  loads: []\n", "loads: []", "objective.loads", "loads is empty", id="empty"),
    pytest.param(
        "  loads: {concurrency: 1}\n", "loads:", "objective.loads", "must be a list", id="not-list"
    ),
    pytest.param(
        "  loads:\n    - 16\n", "- 16", "objective.loads[0]", "must be a mapping", id="not-mapping"
    ),
    pytest.param(
        "  loads:\n    - {concurrency: 1, weight: 0.5}\n    - {concurency: 16, weight: 0.5}\n",
        "concurency",
        "objective.loads[1].concurency",
        "did you mean 'concurrency'",
        id="unknown-key",
    ),
    pytest.param(
        "  loads:\n    - {concurrency: 1}\n",
        "concurrency: 1}",
        "objective.loads[0]",
        "missing key 'weight'",
        id="no-weight",
    ),
    pytest.param(
        "  loads:\n    - {concurrency: 1, weight: -0.5}\n    - {concurrency: 2, weight: 1.5}\n",
        "weight: -0.5",
        "objective.loads[0].weight",
        "must be a positive number",
        id="negative-weight",
    ),
    pytest.param(
        "  loads:\n    - {concurrency: 1, weight: 0}\n    - {concurrency: 2, weight: 1}\n",
        "weight: 0}",
        "objective.loads[0].weight",
        "must be a positive number",
        id="zero-weight",
    ),
    pytest.param(
        "  loads:\n    - {concurrency: 1, weight: high}\n",
        "weight: high",
        "objective.loads[0].weight",
        "must be a number",
        id="text-weight",
    ),
    pytest.param(
        "  loads:\n    - {concurrency: 1, weight: 0.5}\n    - {concurrency: 16, weight: 0.3}\n",
        "loads:",
        "objective.loads",
        "the weights sum to 0.8, not 1",
        id="weights-not-one",
    ),
    pytest.param(
        "  loads:\n    - {concurrency: 4, weight: 0.5}\n    - {concurrency: 4, weight: 0.5}\n",
        "- {concurrency: 4, weight: 0.5}\n    - {concurrency: 4",
        "objective.loads[1]",
        "load point c4 (concurrency 4) is named twice (first as loads[0])",
        id="duplicate",
    ),
    pytest.param(
        "  loads:\n    - {weight: 1}\n",
        "{weight: 1}",
        "objective.loads[0]",
        "needs concurrency or request_rate",
        id="no-load",
    ),
    pytest.param(
        "  loads:\n    - {concurrency: 0, weight: 1}\n",
        "concurrency: 0",
        "objective.loads[0].concurrency",
        "must be >= 1",
        id="zero-concurrency",
    ),
    pytest.param(
        "  loads:\n    - {request_rate: -2, weight: 1}\n",
        "request_rate: -2",
        "objective.loads[0].request_rate",
        "must be a positive number",
        id="negative-rate",
    ),
]


@pytest.mark.parametrize(("body", "needle", "key", "message"), CASES)
def test_a_bad_load_mix_is_refused_at_its_line_and_key(
    tmp_path: Path, body: str, needle: str, key: str, message: str
) -> None:
    text = _with_loads(body)
    error = _refusal(tmp_path, text)
    # a needle of two lines names the second of two identical-looking lines
    first = needle.split("\n")[0]
    line = _line(text, first) + 1 if "\n" in needle else _line(text, needle)
    assert f"space.yaml:{line} ({key})" in error, error
    assert message in error, error
    assert "Traceback" not in error


def test_the_space_check_command_reports_a_bad_mix_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "space.yaml"
    path.write_text(_with_loads("  loads:\n    - {concurrency: 1, weight: 2}\n"))
    run = subprocess.run(
        [sys.executable, "-m", "autotune", "space", "check", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "(objective.loads[0].weight)" in run.stderr and "<= 1" in run.stderr
    assert "Traceback" not in run.stderr
