"""The trial record: outcomes as an enum whose stored values are the plain strings, and the typed
fields a record reads back from a trial's user attributes."""

from __future__ import annotations

import json
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune.crashes import CRASH_CATEGORIES
from autotune.study import (
    CRASH_OUTCOMES,
    Outcome,
    TrialRecord,
    best_feasible_trial,
    feasible_trials,
    within_limits,
)
from autotune.study._record import outcome_of


def test_outcomes_are_their_stored_strings() -> None:
    assert Outcome.OK == "ok" and Outcome("oom_kv_pool") is Outcome.OOM_KV_POOL
    assert f"{Outcome.TIMEOUT}" == str(Outcome.TIMEOUT) == "timeout"
    assert f"{Outcome.OK:>4}" == "  ok"
    assert json.dumps({Outcome.SURPLUS: Outcome.INFEASIBLE}) == '{"surplus": "infeasible"}'
    assert {Outcome.OK: 1} == {"ok": 1}  # hashed as the string: counters of either agree


def test_every_crash_category_is_an_outcome() -> None:
    assert [o.value for o in CRASH_OUTCOMES] == [*CRASH_CATEGORIES, "timeout"]
    assert Outcome.PORT_IN_USE in CRASH_OUTCOMES
    assert all(o.crashed for o in CRASH_OUTCOMES)
    assert all(o.unmeasurable for o in CRASH_OUTCOMES if o is not Outcome.PORT_IN_USE)
    assert Outcome.INFEASIBLE.unmeasurable and not Outcome.INFEASIBLE.crashed
    for outcome in (Outcome.OK, Outcome.INTERRUPTED, Outcome.SURPLUS, Outcome.UNKNOWN):
        assert not outcome.crashed and not outcome.unmeasurable


@pytest.mark.parametrize(
    ("stored", "parsed"),
    [
        (None, None),
        ("ok", Outcome.OK),
        ("port_in_use", Outcome.PORT_IN_USE),
        ("exploded", Outcome.UNKNOWN),
        (3, Outcome.UNKNOWN),
        (["ok"], Outcome.UNKNOWN),
    ],
)
def test_stored_outcomes_are_parsed(stored: Any, parsed: Outcome | None) -> None:
    assert Outcome.parse(stored) is parsed
    attrs = {} if stored is None else {"outcome": stored}
    assert outcome_of(attrs) is parsed


def test_crash_categories_name_their_outcome() -> None:
    assert Outcome.of_crash("port_in_use") is Outcome.PORT_IN_USE
    for odd in (None, "", "ready", "something_new", "ok"):
        assert Outcome.of_crash(odd) is Outcome.OTHER_CRASH


def test_a_record_takes_a_plain_value_as_its_member() -> None:
    record = TrialRecord(outcome="ok", role="search", value=1.0)  # type: ignore[arg-type]
    assert record.outcome is Outcome.OK and record.measured
    with pytest.raises(ValueError):
        TrialRecord(outcome="exploded", role="search")  # type: ignore[arg-type]


def _written() -> TrialRecord:
    return TrialRecord(
        outcome=Outcome.OK,
        role="search",
        command="python -m autotune.sim --port 1",
        startup_s=12.3456,
        benchmark_s=40.0,
        value=123.4,
        metrics={"output_tok_s": 123.4, "accept_length": 2.5},
        speedup=1.2345,
        config={"speculative_num_steps": 3},
        sglang_command="python -m sglang.launch_server --port 1",
        extra={"stop_forced": False},
    )


def test_user_attrs_keep_their_names_and_plain_values() -> None:
    attrs = _written().user_attrs()
    assert type(attrs["outcome"]) is str and attrs["outcome"] == "ok"
    assert attrs["speedup"] == 1.2345 and attrs["config"] == {"speculative_num_steps": 3}
    assert attrs["sglang_command"] == "python -m sglang.launch_server --port 1"
    assert attrs["startup_s"] == 12.346 and attrs["stop_forced"] is False
    assert attrs["accept_length"] == 2.5 and attrs["itl_p99_ms"] is None
    json.dumps(attrs)
    bare = TrialRecord(outcome=Outcome.TIMEOUT, role="search").user_attrs()
    assert not {"speedup", "config", "sglang_command"} & set(bare)


def test_a_record_reads_back_what_it_wrote() -> None:
    written = _written()
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    for key, value in written.user_attrs().items():
        trial.set_user_attr(key, value)
    study.tell(trial, written.value)
    (frozen,) = study.get_trials(states=(TrialState.COMPLETE,))
    read = TrialRecord.from_trial(frozen)
    assert read.outcome is Outcome.OK and read.measured
    assert (read.role, read.command, read.sglang_command) == (
        "search",
        written.command,
        written.sglang_command,
    )
    assert (read.value, read.speedup, read.accept_length) == (123.4, 1.2345, 2.5)
    assert read.startup_s == 12.346 and read.benchmark_s == 40.0
    assert read.config == {"speculative_num_steps": 3}
    assert read.extra == {}  # what no reader needs is not read back


def test_odd_attributes_read_as_missing() -> None:
    read = TrialRecord.from_attrs(
        {
            "outcome": "exploded",
            "speedup": True,
            "startup_s": "12",
            "config": ["x"],
            "command": "",
            "failure_line": 3,
            "accept_length": 1,
        }
    )
    assert read.outcome is Outcome.UNKNOWN and read.role == "search"
    assert read.speedup is None and read.startup_s is None and read.config is None
    assert read.command is None and read.failure_line is None
    assert read.accept_length == 1.0 and type(read.accept_length) is float
    assert TrialRecord.from_attrs({}).outcome is Outcome.UNKNOWN


def test_the_progress_line_reads_the_typed_fields() -> None:
    line = _written().line(5, "output_tok_s")
    assert line == "trial 5 [search] ok: 123.4 output_tok_s x1.23  speculative_num_steps=3"
    crashed = TrialRecord(outcome=Outcome.PORT_IN_USE, role="search", startup_s=2.0)
    assert crashed.line(6, "output_tok_s") == "trial 6 [search] port_in_use after 2.0 s  "


def _trial(
    number: int,
    value: float | None,
    outcome: str | None = "ok",
    constraints: tuple[float, ...] | None = None,
    state: TrialState = TrialState.COMPLETE,
) -> optuna.trial.FrozenTrial:
    from autotune.study._optuna import constraint_system_attrs

    trial = optuna.trial.create_trial(
        state=state,
        value=value if state == TrialState.COMPLETE else None,
        user_attrs={} if outcome is None else {"outcome": outcome},
        system_attrs=constraint_system_attrs(constraints) if constraints is not None else {},
    )
    trial.number = number
    return trial


def test_best_feasible_trial_is_the_best_measured_within_the_limits() -> None:
    trials = [
        _trial(0, 10.0),
        _trial(1, 30.0, constraints=(-1.0, 0.5)),  # over a limit: never the best
        _trial(2, 20.0, constraints=(-1.0, 0.0)),  # on the limit: within
        _trial(3, None, outcome="oom_kv_pool", state=TrialState.PRUNED),
        _trial(4, 20.0),  # as good as trial 2, later
        _trial(5, 25.0, outcome=None),  # recorded by Optuna itself, no outcome: measured
    ]
    assert [t.number for t in feasible_trials(trials)] == [0, 2, 4, 5]
    assert not within_limits(trials[1]) and within_limits(trials[2]) and within_limits(trials[0])
    best = best_feasible_trial(trials, maximize=True)
    assert best is not None and best.number == 5
    worst_first = best_feasible_trial(trials[:5], maximize=False)
    assert worst_first is not None and worst_first.number == 0
    tied = best_feasible_trial(trials[:5], maximize=True)
    assert tied is not None and tied.number == 2  # the first of equal values
    assert best_feasible_trial(trials[1:2], maximize=True) is None


def test_computed_constraints_decide_over_recorded_ones() -> None:
    trials = [_trial(0, 10.0, constraints=(1.0,)), _trial(1, 5.0)]

    def limits(t: optuna.trial.FrozenTrial) -> list[float]:
        return [1.0 if t.number == 1 else -1.0]

    assert [t.number for t in feasible_trials(trials, limits)] == [0]
    best = best_feasible_trial(trials, maximize=True, constraints=limits)
    assert best is not None and best.number == 0
