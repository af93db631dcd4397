"""The shape of a space against the engine's rules: refused when the space is read.

The engine judges each configuration (:meth:`autotune.engines.Engine.check_rules`); a space whose
every speculative proposal it would refuse is a mistake in the file, said once at its line rather
than once per trial.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune._document import Section
    from autotune.engines import Engine
    from autotune.space._params import ParamSpec


def check_shape(
    root: Section, engine: Engine, fixed: Mapping[str, Any], params: tuple[ParamSpec, ...]
) -> None:
    """Refuse a space in which the engine's rules would refuse every speculative proposal.

    Raises:
        ConfigError: some speculative numbers are tuned or fixed but not all three, or they are
            but no speculative algorithm is ever on, or an algorithm needs a draft model the
            engine section does not name.
    """
    tuned = {p.name: p for p in params}
    numbers = engine.speculative_numbers
    named = [k for k in numbers if k in tuned or fixed.get(k) is not None]
    algorithms = [a for a in _algorithms(fixed, tuned) if a != "none"]
    fills = bool(algorithms) and all(engine.fills_speculative_numbers(str(a)) for a in algorithms)
    if named:
        _check_numbers(root, numbers, named, fixed, tuned, fills=fills)
    _check_draft(root, engine, fixed, tuned)


def _algorithms(fixed: Mapping[str, Any], tuned: Mapping[str, ParamSpec]) -> tuple[Any, ...]:
    algo = tuned.get("speculative_algorithm")
    return algo.choices if algo is not None else (fixed.get("speculative_algorithm", "none"),)


def _check_numbers(
    root: Section,
    numbers: tuple[str, ...],
    named: list[str],
    fixed: Mapping[str, Any],
    tuned: Mapping[str, ParamSpec],
    *,
    fills: bool = False,
) -> None:
    sec = root.section("parameters" if named[0] in tuned else "fixed")
    missing = [k for k in numbers if k not in named]
    if missing and not fills:
        raise sec.error(
            f"{', '.join(missing)} not set: SGLang takes the three speculative numbers "
            "all set or none",
            named[0],
            hint=f"add {', '.join(missing)} under parameters: or fixed:",
        )
    if all(c == "none" for c in _algorithms(fixed, tuned)):
        raise sec.error(
            f"{named[0]} is set but speculative decoding is never on",
            named[0],
            hint="set speculative_algorithm: EAGLE3 under fixed:",
        )


def _check_draft(
    root: Section, engine: Engine, fixed: Mapping[str, Any], tuned: Mapping[str, ParamSpec]
) -> None:
    needs = [a for a in _algorithms(fixed, tuned) if engine.lacks_draft_model(str(a))]
    if needs:
        raise root.section("engine").error(
            f"speculative_algorithm {needs[0]} needs a draft model, and none is given",
            hint="add draft_model_path: under engine:",
        )
