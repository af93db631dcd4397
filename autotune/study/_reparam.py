"""How the sampler's model sees the draft-token count: as a share of what the tree can hold.

SGLang ties the three speculative numbers together: with top-k 1 the draft tokens are exactly
steps + 1, and never more than the tree holds (steps x top-k + 1). In the space's own terms the
runnable region is a thin, oddly shaped slice, so a model of it wastes proposals on the rest. The
sampler's model therefore works with ``draft fill`` in [0, 1] instead of the count:

    draft tokens = 2 + fill x (steps x top-k + 1 - 2)      (steps + 1 when top-k is 1)

Every point of the model's space is a configuration SGLang runs as recorded. Trials keep the real
draft-token count in their parameters (what was launched and what the dashboard shows); only the
view handed to the model is translated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution

from autotune.space import ParamSpec, SearchSpace

STEPS = "speculative_num_steps"
TOPK = "speculative_eagle_topk"
DRAFT = "speculative_num_draft_tokens"
FILL = "autotune_draft_fill"


class DraftFill:
    """The translation between draft tokens and draft fill; see the module docstring."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
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
        cap = steps * topk + 1
        if topk == 1 or cap <= 2:
            out[FILL] = 1.0
        else:
            out[FILL] = min(1.0, max(0.0, (float(draft) - 2.0) / (cap - 2.0)))
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
        cap = steps * topk + 1
        target = steps + 1 if topk == 1 else 2.0 + fill * (cap - 2)
        allowed = [v for v in values if v <= cap] or values
        out[DRAFT] = min(allowed, key=lambda v: (abs(v - target), v))
        return out
