"""SGLang's own rules for speculative settings, judged before a server is launched.

A configuration SGLang would refuse is ``bad_args``; one it would silently run as something else
(a rewritten or ignored value) is ``infeasible``: it is refused too, so that a trial never runs a
configuration other than the one recorded. Reasons read ``<rule>: <detail>``; the part before the
first colon is the same for every configuration a rule refuses.

What SGLang accepts but crashes on at run time (NCCL's Tree algorithm with CUDA graphs, an
all-reduce kernel the GPU lacks) is not a rule here: the tuner learns it from the trials.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune._knobs import SPECULATIVE_NUMBERS, ServerConfig
from autotune.engines._base import Infeasible

if TYPE_CHECKING:
    from autotune.engines._spec import EngineSpec
    from autotune.space._loader import Section
    from autotune.space._params import ParamSpec

#: Attention backends without speculative decoding (docs/advanced_features/attention_backend.md).
NO_SPEC_BACKENDS = ("fa4", "trtllm_mla", "torch_native", "flex_attention")
#: Attention backends that run top-k > 1 with a page size > 1.
PAGED_TOPK_BACKENDS = ("flashinfer", "fa3", "triton")
#: Algorithms that load a draft model from ``engine.draft_model_path``.
_DRAFT_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")


def check_rules(config: ServerConfig) -> Infeasible | None:
    """Why SGLang would refuse or rewrite ``config``; ``None`` when it runs as given."""
    numbers = {k: getattr(config, k) for k in SPECULATIVE_NUMBERS}
    given = [k for k, v in numbers.items() if v is not None]
    if not config.speculative:
        if given:
            return Infeasible(
                "speculative numbers without a speculative algorithm: SGLang ignores "
                f"{given[0]}={numbers[given[0]]} when speculative_algorithm is none",
                "infeasible",
                given[0],
            )
        return None
    backend = config.attention_backend
    if backend in NO_SPEC_BACKENDS:
        return Infeasible(
            f"attention backend without speculative decoding: {backend} does not support "
            f"{config.speculative_algorithm}",
            "bad_args",
            "attention_backend",
        )
    if given and len(given) < len(SPECULATIVE_NUMBERS):
        missing = next(k for k in SPECULATIVE_NUMBERS if k not in given)
        return Infeasible(
            "speculative numbers must be set all three or none: "
            f"{', '.join(given)} set but {missing} not",
            "bad_args",
            missing,
        )
    steps = config.speculative_num_steps
    topk = config.speculative_eagle_topk
    draft = config.speculative_num_draft_tokens
    if steps is None or topk is None or draft is None:
        return None  # SGLang chooses all three itself
    if draft < 2:
        return Infeasible(
            f"speculation needs at least 2 draft tokens: speculative_num_draft_tokens={draft}",
            "bad_args",
            "speculative_num_draft_tokens",
        )
    if topk == 1 and draft != steps + 1:
        return Infeasible(
            "top-k 1 fixes the draft tokens at steps + 1: SGLang would run "
            f"speculative_num_draft_tokens={steps + 1} instead of {draft}",
            "infeasible",
            "speculative_num_draft_tokens",
        )
    if steps * topk + 1 < draft:
        return Infeasible(
            "more draft tokens than the draft tree holds: "
            f"{steps} steps x top-k {topk} + 1 = {steps * topk + 1} < {draft}",
            "bad_args",
            "speculative_num_draft_tokens",
        )
    if backend == "trtllm_mha" and topk > 1:
        return Infeasible(
            "trtllm_mha runs speculative decoding with top-k 1 only: "
            f"speculative_eagle_topk={topk}",
            "bad_args",
            "speculative_eagle_topk",
        )
    page = config.page_size
    # With the backend unset SGLang picks one for the GPU; only a named backend is judged here.
    if topk > 1 and page is not None and page > 1 and backend not in (None, *PAGED_TOPK_BACKENDS):
        return Infeasible(
            "top-k > 1 with a page size > 1 needs flashinfer, fa3 or triton attention: "
            f"speculative_eagle_topk={topk}, page_size={page}, attention_backend={backend}",
            "bad_args",
            "speculative_eagle_topk",
        )
    return None


def check_shape(
    root: Section, engine: EngineSpec, fixed: Mapping[str, Any], params: tuple[ParamSpec, ...]
) -> None:
    """Refuse a space in which SGLang's rules would refuse every speculative proposal.

    Raises:
        ConfigError: some speculative numbers are tuned or fixed but not all three, or they are
            but no speculative algorithm is ever on, or a real engine lacks the draft model.
    """
    tuned = {p.name: p for p in params}
    named = [k for k in SPECULATIVE_NUMBERS if k in tuned or fixed.get(k) is not None]
    if named:
        _check_numbers(root, named, fixed, tuned)
    _check_draft(root, engine, fixed, tuned)


def _check_numbers(
    root: Section, named: list[str], fixed: Mapping[str, Any], tuned: Mapping[str, ParamSpec]
) -> None:
    sec = root.section("parameters" if named[0] in tuned else "fixed")
    missing = [k for k in SPECULATIVE_NUMBERS if k not in named]
    if missing:
        raise sec.error(
            f"{', '.join(missing)} not set: SGLang takes the three speculative numbers "
            "all set or none",
            named[0],
            hint=f"add {', '.join(missing)} under parameters: or fixed:",
        )
    algo = tuned.get("speculative_algorithm")
    choices = algo.choices if algo is not None else (fixed.get("speculative_algorithm", "none"),)
    if all(c == "none" for c in choices):
        raise sec.error(
            f"{named[0]} is set but speculative decoding is never on",
            named[0],
            hint="set speculative_algorithm: EAGLE3 under fixed:",
        )


def _check_draft(
    root: Section, engine: EngineSpec, fixed: Mapping[str, Any], tuned: Mapping[str, ParamSpec]
) -> None:
    if engine.kind != "sglang" or engine.draft_model_path is not None:
        return
    algo = tuned.get("speculative_algorithm")
    algos = algo.choices if algo is not None else (fixed.get("speculative_algorithm", "none"),)
    needs = [a for a in algos if a in _DRAFT_ALGORITHMS]
    if needs:
        raise root.section("engine").error(
            f"speculative_algorithm {needs[0]} needs a draft model, and none is given",
            hint="add draft_model_path: under engine:",
        )
