"""Tuned parameters: their kinds, how they are read from a space file, and their Optuna form.

A parameter is one canonical knob (see :class:`autotune._knobs.ServerConfig`) with a domain:
``int`` (``low``, ``high``, ``step``, ``log``), ``float`` (``low``, ``high``, ``step`` or
``log``) or ``categorical`` (``choices``). ``when`` makes it conditional on the values of
parameters declared above it: it is only suggested while the condition holds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune._document import MAX_STRING_CHARS, Section, as_number, number_hint, suggest
from autotune._errors import ConfigError
from autotune._knobs import ALLREDUCE_MODES, ServerConfig

if TYPE_CHECKING:
    import optuna

KINDS = ("int", "float", "categorical")
_KEYS = {
    "int": ("type", "low", "high", "step", "log", "when"),
    "float": ("type", "low", "high", "step", "log", "when"),
    "categorical": ("type", "choices", "when"),
}
#: Knobs a space may not tune or fix: ``engine.tp_size`` decides the tensor-parallel size.
ENGINE_KNOBS = ("tp_size",)
#: The largest magnitude of a knob's value, bound or step (no knob of SGLang goes near it).
MAX_MAGNITUDE = 10**9
#: The most values one stepped range may hold (its grid is listed by ``values``).
MAX_VALUES = 1_000_000


def knob_kind(knob: str) -> str:
    """The value type of a canonical knob: ``int``, ``float``, ``bool`` or ``str``."""
    for f in dataclasses.fields(ServerConfig):
        if f.name == knob:
            base = str(f.type).replace(" | None", "").replace("None | ", "").strip()
            return base if base in ("int", "float", "bool") else "str"
    raise KeyError(knob)


def coerce_knob(knob: str, raw: Any) -> Any:
    """``raw`` as a value of ``knob`` (``auto`` becomes ``None``); ConfigError if it is none."""
    return getattr(ServerConfig.from_params({knob: raw}), knob)


def same_value(a: Any, b: Any) -> bool:
    """Equality that does not confuse ``true`` with ``1``."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


@dataclass(frozen=True)
class ParamSpec:
    """One tuned knob and its domain (see the module docstring)."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    when: Mapping[str, tuple[Any, ...]] | None = None

    def distribution(self) -> optuna.distributions.BaseDistribution:
        """The Optuna distribution of this parameter."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.kind == "categorical":
            return CategoricalDistribution(self.choices)
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            step = 1 if self.step is None else int(self.step)
            return IntDistribution(int(self.low), int(self.high), log=self.log, step=step)
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is one this parameter can take."""
        if self.kind == "categorical":
            return any(same_value(value, c) for c in self.choices)
        assert self.low is not None and self.high is not None
        if self.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            return False
        number = as_number(value)
        if number is None:
            return False
        eps = 1e-9 * max(1.0, self.high - self.low)
        if not self.low - eps <= number <= self.high + eps:
            return False
        if self.step is None:
            return True
        k = (number - self.low) / self.step
        return abs(k - round(k)) <= 1e-6

    def active(self, values: Mapping[str, Any]) -> bool:
        """Whether the ``when`` condition holds for the values chosen so far."""
        if not self.when:
            return True
        return all(
            knob in values and any(same_value(values[knob], v) for v in allowed)
            for knob, allowed in self.when.items()
        )

    def suggest(self, trial: optuna.Trial) -> Any:
        """Ask ``trial`` for a value of this parameter."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices))
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            step = 1 if self.step is None else int(self.step)
            return trial.suggest_int(
                self.name, int(self.low), int(self.high), step=step, log=self.log
            )
        value = trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)
        return self.normalise(value)

    def normalise(self, value: Any) -> Any:
        """``value`` without floating-point noise on a step grid (0.88, not 0.8799999999999999)."""
        if self.kind == "float" and self.step is not None and isinstance(value, float):
            return float(f"{value:.12g}")
        return value

    def values(self) -> tuple[Any, ...] | None:
        """Every value this parameter can take, or None when there are infinitely many."""
        if self.kind == "categorical":
            return self.choices
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            step = 1 if self.step is None else int(self.step)
            return tuple(range(int(self.low), int(self.high) + 1, step))
        if self.step is None:
            return None
        n = round((self.high - self.low) / self.step)
        return tuple(round(self.low + i * self.step, 12) for i in range(n + 1))

    def describe(self) -> str:
        """``int 1..6``, ``float 0.7..0.94 step 0.01``, ``categorical [1, 2, 4]``, with ``when``."""
        if self.kind == "categorical":
            text = "one of " + ", ".join(_show(c) for c in self.choices)
        else:
            text = f"{self.kind} {_show(self.low)}..{_show(self.high)}"
            if self.step is not None and not (self.kind == "int" and self.step == 1):
                text += f" step {_show(self.step)}"
            if self.log:
                text += " log"
        if self.when:
            conds = [
                f"{k} = {_show(v[0])}" if len(v) == 1 else f"{k} in [{', '.join(map(_show, v))}]"
                for k, v in self.when.items()
            ]
            text += " (only when " + " and ".join(conds) + ")"
        return text


def parse_param(
    sec: Section,
    earlier: Mapping[str, ParamSpec],
    fixed: Mapping[str, Any],
    names: Sequence[str],
) -> ParamSpec:
    """Read ``parameters.<name>`` from ``sec`` (its name is the last part of its path).

    ``earlier`` holds the parameters declared above it (a ``when`` may refer to those only),
    ``names`` every parameter of the file, ``fixed`` the fixed knobs.
    """
    name = str(sec.path[-1])
    kind = _kind_of(sec, name)
    sec.check_keys(_KEYS[kind])
    when = _parse_when(sec, name, earlier, fixed, names)
    if kind == "categorical":
        return ParamSpec(name, kind, choices=_parse_choices(sec, name), when=when)
    if "low" not in sec or "high" not in sec:
        raise sec.error(
            f"a {kind} parameter needs low and high", hint="e.g. {type: int, low: 1, high: 6}"
        )
    low, high = _bound(sec, name, kind, "low"), _bound(sec, name, kind, "high")
    if not low < high:
        raise sec.error(
            f"low ({_show(low)}) must be below high ({_show(high)})",
            "high",
            hint="a knob with one value belongs under fixed:",
        )
    log = sec.boolean("log", False)
    step = _parse_step(sec, kind, low, high, log)
    if kind == "int" and step is not None and (high - low) // step + 1 > MAX_VALUES:
        raise sec.error(
            f"the range {_show(low)}..{_show(high)} holds {(high - low) // step + 1:,.0f} "
            f"whole numbers; at most {MAX_VALUES:,} are allowed",
            "high",
            hint="narrow the range or give a larger step",
        )
    if log and low <= 0:
        raise sec.error(f"a log range needs low > 0, got {_show(low)}", "low")
    return ParamSpec(name, kind, low=low, high=high, step=step, log=log, when=when)


def _kind_of(sec: Section, name: str) -> str:
    knob = knob_kind(name)
    raw = sec.get("type")
    if raw is None:
        if "choices" in sec:
            raw = "categorical"
        elif knob in ("int", "float"):
            raw = knob
        else:
            raise sec.error("missing key 'type'", hint="type: categorical, with choices: [...]")
    if raw not in KINDS:
        raise sec.error(f"unknown type {raw!r}", "type", hint="allowed: " + ", ".join(KINDS))
    if raw == "categorical" or raw == knob:
        return str(raw)
    if knob == "float":
        hint = f"{name} is a fraction: use type: float"
    elif knob == "int":
        hint = f"{name} takes whole numbers: use type: int"
    else:
        allowed = f" (allowed: {', '.join(ALLREDUCE_MODES)})" if name == "allreduce" else ""
        hint = f"{name} takes named values: use type: categorical with choices{allowed}"
    raise sec.error(f"type {raw} does not fit knob {name}", "type", hint=hint)


def _bound(sec: Section, name: str, kind: str, key: str) -> float:
    raw = sec.get(key)
    if kind == "int" and (isinstance(raw, bool) or not isinstance(raw, int)):
        raise sec.error(f"must be an integer, got {_show_raw(raw)}", key)
    _coerce_at(sec, key, name, raw)  # range first: int(1e30) would not fit a float
    value = as_number(raw)
    if value is None:
        raise sec.error(f"must be a number, got {_show_raw(raw)}", key, hint=number_hint(raw))
    return int(raw) if kind == "int" else value


def _parse_step(sec: Section, kind: str, low: float, high: float, log: bool) -> float | None:
    raw = sec.get("step")
    if raw is None:
        return 1 if kind == "int" else None
    if kind == "int" and (isinstance(raw, bool) or not isinstance(raw, int)):
        raise sec.error(f"must be an integer, got {_show_raw(raw)}", "step")
    problem = value_problem(raw)
    if problem is not None:
        raise sec.error(problem[0], "step", hint=problem[1])
    step = as_number(raw)
    if step is None or step <= 0:
        raise sec.error(
            f"must be a positive number, got {_show_raw(raw)}", "step", hint=number_hint(raw)
        )
    if log and (kind == "float" or step != 1):
        raise sec.error("step and log: true cannot be combined", "step", hint="drop one of them")
    n = (high - low) / step
    if n + 1 > MAX_VALUES:
        raise sec.error(
            f"the range {_show(low)}..{_show(high)} step {_show(step)} holds {n + 1:,.0f} values; "
            f"at most {MAX_VALUES:,} are allowed",
            "step",
            hint="use a larger step, a narrower range, or log: true",
        )
    if abs(n - round(n)) > 1e-6 * max(1.0, n):
        below = low + math.floor(n) * step
        above = low + math.ceil(n) * step
        raise sec.error(
            f"step {_show(step)} does not divide the range {_show(low)}..{_show(high)}",
            "step",
            hint=f"use high: {_show(below)} or high: {_show(above)}, or another step",
        )
    return int(step) if kind == "int" else step


def _parse_choices(sec: Section, name: str) -> tuple[Any, ...]:
    raw = sec.require("choices")
    if not isinstance(raw, list) or not raw:
        raise sec.error("choices must be a non-empty list", "choices", hint="e.g. [1, 2, 4, 8]")
    if len(raw) == 1:
        raise sec.error(
            "a parameter with a single choice is not tuned",
            "choices",
            hint=f"move it under fixed: as {name}: {_show(raw[0])}",
        )
    out: list[Any] = []
    for i, item in enumerate(raw):
        if isinstance(item, (list, dict)):
            raise sec.doc.error(
                f"a choice must be a single value, got {item!r}", (*sec.path, "choices", i)
            )
        value = _coerce_at(sec, ("choices", i), name, item)
        twin = next((j for j, seen in enumerate(out) if same_value(value, seen)), None)
        if twin is not None:
            same = "" if raw[twin] == item else f" (the same value as {_show(raw[twin])})"
            raise sec.doc.error(
                f"duplicate choice {_show(item)}{same}",
                (*sec.path, "choices", i),
                hint="list each value once",
            )
        out.append(value)
    return tuple(out)


def _parse_when(
    sec: Section,
    name: str,
    earlier: Mapping[str, ParamSpec],
    fixed: Mapping[str, Any],
    names: Sequence[str],
) -> Mapping[str, tuple[Any, ...]] | None:
    if "when" not in sec:
        return None
    cond = sec.section("when")
    if not cond.data:
        raise sec.error(
            "when must name at least one knob",
            "when",
            hint="e.g. when: {speculative_eagle_topk: [2, 4]}",
        )
    out: dict[str, tuple[Any, ...]] = {}
    for knob, raw in cond.data.items():
        if knob in fixed:
            raise cond.error(
                f"{knob} is fixed, so this condition never changes",
                knob,
                hint=f"drop the condition, or move {knob} from fixed: to parameters:",
            )
        if knob not in earlier:
            if knob == name:
                problem, hint = f"{name} cannot depend on itself", "drop this condition"
            elif knob in names:
                problem, hint = f"{knob} is declared below {name}", f"declare {knob} above {name}"
            elif knob in ServerConfig.knob_names():
                problem = f"{knob} is not tuned in this space"
                hint = f"add {knob} under parameters:, above {name}"
            else:
                problem = f"unknown knob {knob!r}"
                hint = suggest(str(knob), earlier) if earlier else "no parameter is declared above"
            raise cond.error(
                f"a condition must refer to a parameter declared above it: {problem}",
                knob,
                hint=hint,
            )
        values = raw if isinstance(raw, list) else [raw]
        if not values:
            raise cond.error("the list of values is empty", knob)
        allowed = []
        for i, item in enumerate(values):
            where: Any = (knob, i) if isinstance(raw, list) else knob
            value = _coerce_at(cond, where, knob, item)
            if not earlier[knob].contains(value):
                raise cond.doc.error(
                    f"{knob} never takes the value {_show(item)}, so this condition never holds",
                    (*cond.path, *where) if isinstance(where, tuple) else (*cond.path, where),
                    hint=f"{knob} is {earlier[knob].describe()}",
                )
            allowed.append(value)
        out[knob] = tuple(allowed)
    return out


def _coerce_at(sec: Section, key: Any, knob: str, raw: Any) -> Any:
    path = (*sec.path, *key) if isinstance(key, tuple) else (*sec.path, key)
    problem = value_problem(raw)
    if problem is not None:
        raise sec.doc.error(problem[0], path, hint=problem[1])
    try:
        return coerce_knob(knob, raw)
    except ConfigError as e:
        raise sec.doc.error(e.message, path, hint=e.hint) from None


def value_problem(raw: Any) -> tuple[str, str] | None:
    """Why ``raw`` cannot be a knob's value whatever the knob (message, hint), or None.

    Numbers must be finite and within :data:`MAX_MAGNITUDE`; text must have no NUL character
    and at most :data:`~autotune._document.MAX_STRING_CHARS` characters.
    """
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        if isinstance(raw, float) and not math.isfinite(raw):
            return f"must be a finite number, got {raw!r}", "write a number such as 0.85"
        if abs(raw) > MAX_MAGNITUDE:
            text = f"{raw:.3g}" if abs(raw) < 1e300 else "an enormous number"
            return (
                f"{text} is out of range: a knob's value is at most {MAX_MAGNITUDE:,} in size",
                "write the value the server should use",
            )
        return None
    if isinstance(raw, str):
        if "\x00" in raw:
            return "contains a NUL character", "a NUL cannot be passed to a program"
        if len(raw) > MAX_STRING_CHARS:
            return (
                f"is {len(raw):,} characters long; at most {MAX_STRING_CHARS:,} are allowed",
                "write the value the server should use",
            )
    return None


def _show_raw(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:60] + "..."


def _show(value: Any) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(value)
