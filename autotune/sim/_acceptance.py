"""Acceptance of EAGLE draft trees.

The draft head proposes, at each depth, a ranked list of next tokens. The target's true token is
the head's rank-1 guess with probability ``p_d`` (``p1`` at depth 1, decaying by ``decay`` per
depth down to ``floor``), its rank-``j`` guess (j >= 2) with probability
``(1 - p_d) * rank_share * (1 - rank_ratio) * rank_ratio ** (j - 2)``, and none of them otherwise.
Temperature lowers ``p_d`` by ``temperature_penalty * T`` (relative); a workload's acceptance
scale multiplies it (domain shift).

The tree is built as SGLang's EAGLE worker builds it: the root expands into ``topk`` children;
at each further step the ``topk`` best frontier nodes (by path score) each expand into ``topk``
children; finally the ``num_draft_tokens - 1`` best nodes overall are verified. The expected
accept length is ``1 + sum(P(path to node is correct))`` over the verified nodes (the bonus token
included), exactly SGLang's ``completion_tokens / spec_verify_ct``.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from functools import lru_cache

from autotune._knobs import ServerConfig
from autotune.sim._profile import Acceptance


@dataclass(frozen=True)
class DraftTree:
    """The verified nodes: each a path of ranks from the root (rank 1 = the head's first guess)."""

    nodes: tuple[tuple[int, ...], ...]
    expected_accept_length: float

    @property
    def size(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class AcceptanceModel:
    """Per-depth correctness of one draft head under one workload."""

    depth_p: tuple[float, ...]
    rank_share: float
    rank_ratio: float

    @classmethod
    def build(
        cls, acc: Acceptance, *, depth: int, temperature: float, scale: float
    ) -> AcceptanceModel:
        factor = max(0.0, 1.0 - acc.temperature_penalty * temperature) * scale
        ps = []
        for d in range(depth):
            p = max(acc.floor, acc.p1 * acc.decay**d) * factor
            ps.append(min(0.995, max(0.0, p)))
        return cls(tuple(ps), acc.rank_share, acc.rank_ratio)

    def scaled(self, share: float) -> AcceptanceModel:
        """The same drafter with every per-depth probability times ``share`` (a drafter that
        has learned ``share`` of what it will know: an n-gram table still filling)."""
        if share == 1.0:
            return self
        ps = tuple(min(0.995, max(0.0, p * share)) for p in self.depth_p)
        return AcceptanceModel(ps, self.rank_share, self.rank_ratio)

    def rank_probability(self, depth: int, rank: int) -> float:
        """P(the true token at ``depth`` (0-based) is the head's rank-``rank`` guess)."""
        p = self.depth_p[depth]
        if rank == 1:
            return p
        return (1.0 - p) * self.rank_share * (1.0 - self.rank_ratio) * self.rank_ratio ** (rank - 2)

    def tree(self, steps: int, topk: int, num_draft_tokens: int) -> DraftTree:
        return _build_tree(self, steps, topk, num_draft_tokens)

    def sample_accepted(self, tree: DraftTree, rng: random.Random) -> int:
        """Draft tokens accepted in one verify pass (bonus token excluded), sampled."""
        node_set = _node_set(tree)
        path: tuple[int, ...] = ()
        for depth in range(len(self.depth_p)):
            u = rng.random()
            rank = 0
            cum = 0.0
            for r in range(1, 65):
                cum += self.rank_probability(depth, r)
                if u < cum:
                    rank = r
                    break
            if rank == 0:
                break
            path = (*path, rank)
            if path not in node_set:
                path = path[:-1]
                break
        return len(path)


def tree_shape(config: ServerConfig) -> tuple[int, int, int]:
    """(depth, breadth, verified tokens) of the draft tree ``config`` builds.

    EAGLE-family heads draft ``steps`` deep, ``topk`` wide. NGRAM has no draft steps (SGLang
    sets them to draft tokens // breadth, 0 with 8 draft tokens and breadth 10): its BFS over
    the n-gram table proposes up to ``num_draft_tokens - 1`` tokens, as deep as a match goes,
    ``topk`` (its BFS breadth) wide.
    """
    steps = config.speculative_num_steps or 0
    topk = config.speculative_eagle_topk or 1
    draft = config.speculative_num_draft_tokens or (max(1, steps) + 1)
    if config.speculative_algorithm == "NGRAM":
        return max(1, draft - 1), topk, draft
    return max(1, steps), topk, draft


@lru_cache(maxsize=4096)
def _node_set(tree: DraftTree) -> frozenset[tuple[int, ...]]:
    return frozenset(tree.nodes)


@lru_cache(maxsize=65536)
def _build_tree(model: AcceptanceModel, steps: int, topk: int, num_draft_tokens: int) -> DraftTree:
    budget = max(0, num_draft_tokens - 1)
    depth_limit = min(steps, len(model.depth_p))
    if budget == 0 or depth_limit == 0:
        return DraftTree((), 1.0)
    # candidates: (path, path probability)
    candidates: list[tuple[tuple[int, ...], float]] = []
    frontier: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    for depth in range(depth_limit):
        children: list[tuple[tuple[int, ...], float]] = []
        for path, prob in frontier:
            for rank in range(1, topk + 1):
                children.append(((*path, rank), prob * model.rank_probability(depth, rank)))
        candidates.extend(children)
        frontier = heapq.nlargest(topk, children, key=lambda c: c[1])
    chosen = heapq.nlargest(budget, candidates, key=lambda c: c[1])
    # a verified tree must be connected: parents score at least as high as children, so the
    # greedy choice is connected except for ties; add missing parents by construction
    paths = {c[0] for c in chosen}
    for path, _ in list(chosen):
        for cut in range(1, len(path)):
            paths.add(path[:cut])
    probs = dict(candidates)
    ordered = (
        sorted(paths, key=lambda p: (len(p), p))[:budget]
        if len(paths) > budget
        else sorted(paths, key=lambda p: (len(p), p))
    )
    expected = 1.0 + sum(probs.get(p, 0.0) for p in ordered)
    return DraftTree(tuple(ordered), expected)
