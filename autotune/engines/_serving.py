"""What the benchmark needs to know of an engine's HTTP API, besides the workload's own routes.

The routes a workload sends its requests to are named by the workload (``api``: ``generate``,
``completions`` or ``chat``) and so are not here; ``/v1/models``, which the benchmark asks first
to find the served model's name, is the OpenAI-compatible route every engine serves. What differs
between engines is said by a :class:`ServerApi`: the route that drops the prefix cache, the
statistics routes read around a run, and how a request's answer and those statistics report
speculative acceptance.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

#: Where a run's acceptance figure came from (see :class:`ServerApi` and its adapters).
ACCEPTANCE_SOURCES = (
    "request_meta_info",
    "server_info_diff",
    "server_info_lifetime",
    "metrics_gauge",
    "metrics_diff",
    "none",
)


@dataclass(frozen=True)
class Acceptance:
    """Speculative acceptance of one run and where the figure came from."""

    accept_length: float | None = None
    accept_rate: float | None = None
    source: str = "none"


@dataclass(frozen=True)
class DraftStats:
    """The speculative statistics one request's answer reported (``None``: not reported).

    ``verify_ct`` counts the verify passes that produced the request's tokens; ``accept_length``
    and ``accept_rate`` are the engine's own per-request figures; ``num_correct_drafts`` and
    ``num_proposed_drafts`` count draft tokens accepted and proposed.
    """

    verify_ct: int | None = None
    accept_length: float | None = None
    accept_rate: float | None = None
    num_correct_drafts: int | None = None
    num_proposed_drafts: int | None = None

    def updated(self, newer: DraftStats) -> DraftStats:
        """These statistics with every value ``newer`` reports in place of the older one."""
        if newer is NO_DRAFT_STATS or newer == self:
            return self
        if self is NO_DRAFT_STATS:
            return newer

        def pick(old: T | None, new: T | None) -> T | None:
            return old if new is None else new

        return DraftStats(
            verify_ct=pick(self.verify_ct, newer.verify_ct),
            accept_length=pick(self.accept_length, newer.accept_length),
            accept_rate=pick(self.accept_rate, newer.accept_rate),
            num_correct_drafts=pick(self.num_correct_drafts, newer.num_correct_drafts),
            num_proposed_drafts=pick(self.num_proposed_drafts, newer.num_proposed_drafts),
        )


#: A request's answer that reported no speculative statistics.
NO_DRAFT_STATS = DraftStats()


class ServerApi(abc.ABC):
    """One engine's HTTP API as the benchmark uses it (see the module docstring).

    ``flush_cache_path`` is ``POST``-ed after the warm-up when a run asks for a cold prefix
    cache (``None``: the engine has no such route); ``stats_before`` are ``GET`` before the
    measured requests and ``stats_after`` after them, their bodies given to :meth:`from_server`.
    """

    flush_cache_path: str | None = None
    stats_before: tuple[str, ...] = ()
    stats_after: tuple[str, ...] = ()

    @abc.abstractmethod
    def from_meta_info(self, meta: Mapping[str, Any]) -> DraftStats:
        """The speculative statistics one streamed ``/generate`` chunk's ``meta_info`` reports
        (a :class:`DraftStats` of ``None`` fields when it reports none)."""

    def of_requests(self, requests: Iterable[tuple[int, DraftStats]]) -> Acceptance | None:
        """Acceptance of completed requests, given as ``(output tokens, statistics)``.

        Accept length is output tokens per verify pass over the requests that counted their
        verify passes; accept rate is accepted over proposed draft tokens where every such
        request counted both, else the requests' own rates weighted by verify passes. ``None``
        when no request counted its verify passes.
        """
        done = [(tokens, s) for tokens, s in requests if s.verify_ct]
        if not done:
            return None
        verify = sum(s.verify_ct or 0 for _, s in done)
        length = sum(tokens for tokens, _ in done) / verify
        rate: float | None = None
        if all(s.num_proposed_drafts is not None for _, s in done):
            proposed = sum(s.num_proposed_drafts or 0 for _, s in done)
            if proposed > 0:
                rate = sum(s.num_correct_drafts or 0 for _, s in done) / proposed
        elif all(s.accept_rate is not None for _, s in done):
            weighted = sum((s.accept_rate or 0.0) * (s.verify_ct or 0) for _, s in done)
            rate = weighted / verify
        return Acceptance(length, rate, "request_meta_info")

    def from_server(
        self, before: Mapping[str, str | None], after: Mapping[str, str | None]
    ) -> Acceptance | None:
        """Acceptance from the server's own statistics: ``before`` and ``after`` map each path of
        :attr:`stats_before` / :attr:`stats_after` to its body (``None``: no answer).
        ``None`` when they tell nothing."""
        return None
