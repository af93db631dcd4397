"""How the sampler's model sees the draft-token count: as a share of what the tree can hold.

The engine ties the three speculative numbers together: for given steps and top-k it runs as
given only draft-token counts between two bounds (:meth:`Engine.draft_token_bounds`; SGLang:
exactly steps + 1 with top-k 1, else 2 to steps x top-k + 1). In the space's own terms the
runnable region is a thin, oddly shaped slice, so a model of it wastes proposals on the rest. The
sampler's model therefore works with ``draft fill`` in [0, 1] instead of the count:

    draft tokens = low + fill x (high - low)      (low, high: the engine's bounds)

Every point of the model's space is a configuration the engine runs as recorded. Trials keep the
real draft-token count in their parameters (what was launched and what the dashboard shows); only
the view handed to the model is translated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution

from autotune.engines import Engine, create_engine
from autotune.space import ParamSpec, SearchSpace

STEPS = "speculative_num_steps"
TOPK = "speculative_eagle_topk"
DRAFT = "speculative_num_draft_tokens"
FILL = "autotune_draft_fill"


class DraftFill:
    """The translation between draft tokens and draft fill; see the module docstring."""

    def __init__(self, space: SearchSpace, engine: Engine | None = None) -> None:
        """``engine``: the one whose draft tree is meant (default: the space's engine)."""
        self.space = space
        self.engine = engine if engine is not None else create_engine(space.engine)
        draft = space.parameter(DRAFT)
        self.draft: ParamSpec | None = draft
        names = {p.name for p in space.parameters}
        values = draft.values() if draft is not None else None
        self.active = (
            {STEPS, TOPK, DRAFT} <= names
            and values is not None
            and all(isinstance(v, int) for v in values)
            and not any(p.when for p in space.parameters if p.name in (STEPS, TOPK, DRAFT))
        )

    def distributions(self, dists: Mapping[str, BaseDistribution]) -> dict[str, BaseDistribution]:
        out = dict(dists)
        if self.active and DRAFT in out:
            del out[DRAFT]
            out[FILL] = FloatDistribution(0.0, 1.0)
        return out

    def to_model(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Space parameters to the model's (draft tokens replaced by fill)."""
        out = dict(params)
        if not self.active or DRAFT not in out:
            return out
        steps, topk, draft = out.get(STEPS), out.get(TOPK), out.pop(DRAFT)
        if not isinstance(steps, int) or not isinstance(topk, int):
            out[FILL] = 1.0
            return out
        low, high = self.engine.draft_token_bounds(steps, topk)
        if high <= low:
            out[FILL] = 1.0
        else:
            out[FILL] = min(1.0, max(0.0, (float(draft) - low) / (high - low)))
        return out

    def from_model(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The model's parameters back to the space's (the nearest allowed draft count)."""
        out = dict(params)
        if not self.active or FILL not in out:
            return out
        fill = float(out.pop(FILL))
        steps, topk = out.get(STEPS), out.get(TOPK)
        assert self.draft is not None
        values = list(self.draft.values() or ())
        if not isinstance(steps, int) or not isinstance(topk, int) or not values:
            return out
        low, high = self.engine.draft_token_bounds(steps, topk)
        target = low + fill * (high - low)
        allowed = [v for v in values if v <= high] or values
        out[DRAFT] = min(allowed, key=lambda v: (abs(v - target), v))
        return out
