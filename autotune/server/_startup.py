"""Watching a server start: ready, crashed or timed out, decided as early as the log shows it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from autotune._errors import ConfigError
from autotune.server._follow import LogFollower
from autotune.server._process import ServerProcess

if TYPE_CHECKING:
    import httpx

#: The category of a server that exited before it was ready with nothing in its log deciding a
#: crash: the crash reader's ``unknown_crash`` (the classifier is given, not imported: the server
#: layer sits beside the crash reader, not above it).
UNEXPLAINED_EXIT = "unknown_crash"

StartupStatus = Literal["ready", "crashed", "exited", "timeout", "interrupted"]


@dataclass(frozen=True)
class Probe:
    """One HTTP check of readiness: ``GET path`` must answer 200.

    ``json_object``: the answer must also be a JSON object. ``needs_key``: the route wants the
    server's API key, so a 401 or 403 is explained as a missing or refused key.
    """

    path: str
    json_object: bool = False
    needs_key: bool = False


@dataclass(frozen=True)
class Readiness:
    """How an engine's server says it is ready, as its adapter describes it.

    A log line that contains one of ``ready_lines`` says the server reports itself ready; the
    ``probes`` then confirm it over HTTP, in order, each of them asked again until it passes.
    """

    ready_lines: tuple[str, ...]
    probes: tuple[Probe, ...]

    def is_ready_line(self, line: str) -> bool:
        """Whether ``line`` is one of the engine's ready lines."""
        return any(text in line for text in self.ready_lines)


class Classification(Protocol):
    """A verdict on a log: a crash category, the line that shows it, whether it is a crash."""

    @property
    def category(self) -> str: ...

    @property
    def evidence(self) -> str | None: ...

    @property
    def is_crash(self) -> bool: ...


class LineClassifier(Protocol):
    """Reads a log line by line; says "crash" as soon as a line decides it.

    ``feed`` returns a classification when the line decides something (only those with
    ``is_crash`` stop the start-up), ``finish`` the verdict on the whole log once the process
    has exited.
    """

    def feed(self, line: str) -> Classification | None: ...

    def finish(self, exit_code: int | None = None) -> Classification: ...


@dataclass(frozen=True)
class StartupResult:
    """How a start-up ended.

    ``category`` is the crash category (``unknown_crash`` when the process exited with nothing
    specific in its log) or ``timeout``; ``failure_line`` the log line that decided a crash (the
    last log line for an exit without evidence or a timeout). ``startup_s`` counts from launch to
    ready, or to the deciding line, exit or deadline. ``exit_code`` is set when the process had
    exited (negative: the signal that ended it). ``detail`` says in words what happened.
    """

    status: StartupStatus
    category: str | None
    failure_line: str | None
    startup_s: float
    exit_code: int | None
    lines_seen: int
    detail: str = ""

    @property
    def ready(self) -> bool:
        return self.status == "ready"


def wait_for_startup(
    proc: ServerProcess,
    *,
    classifier: LineClassifier,
    readiness: Readiness,
    url: str,
    timeout_s: float,
    poll_interval_s: float = 0.05,
    health_timeout_s: float = 20.0,
    probe_interval_s: float = 0.5,
    require_ready_line: bool = True,
    on_line: Callable[[str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    api_key: str | None = None,
) -> StartupResult:
    """Follow ``proc``'s log until the server is ready, has crashed, has exited, or time is up.

    Every new log line goes to ``on_line`` and to ``classifier``; a line it calls a crash ends
    the wait at once (the process is left running: stopping it is the caller's ``with``). An
    exit lets ``classifier.finish()`` judge the whole log. After a ready line of ``readiness``
    (the engine's: for SGLang "The server is fired up and ready to roll!") readiness is
    confirmed over HTTP at ``url`` by ``readiness.probes`` (for SGLang ``GET /health_generate``
    must answer 200, asked again every ``probe_interval_s`` until it does, then
    ``GET /get_model_info`` 200 with a JSON object). With ``require_ready_line=False`` (a server
    whose log is not visible, behind a launch prefix) the HTTP checks run from the start and
    suffice. ``timeout_s`` counts
    from the launch. ``api_key``: the server's ``--api-key``, sent as ``Authorization: Bearer``.
    ``cancelled`` is asked at every poll (``poll_interval_s``): once it answers True the wait
    ends with status ``interrupted`` (a stop was asked for; the process is left running, for
    the caller to stop).
    """
    import httpx

    _check_url(url)
    deadline = proc.started_at + timeout_s
    follower = LogFollower(proc.log_path, start_offset=proc.log_offset)
    ready_line_seen = not require_ready_line
    next_probe = time.monotonic()
    probe_failure = "not asked yet"

    def result(
        status: StartupStatus,
        category: str | None,
        line: str | None,
        detail: str,
        exit_code: int | None = None,
    ) -> StartupResult:
        return StartupResult(
            status=status,
            category=category,
            failure_line=line,
            startup_s=time.monotonic() - proc.started_at,
            exit_code=exit_code,
            lines_seen=follower.line_count,
            detail=detail,
        )

    def scan(lines: list[str]) -> Classification | None:
        nonlocal ready_line_seen
        for line in lines:
            if on_line is not None:
                on_line(line)
            verdict = classifier.feed(line)
            if verdict is not None and verdict.is_crash:
                return verdict
            if not ready_line_seen and readiness.is_ready_line(line):
                ready_line_seen = True
        return None

    with follower, httpx.Client(trust_env=False, follow_redirects=False) as client:
        while True:
            if cancelled is not None and cancelled():
                return result("interrupted", None, None, "the wait was interrupted")
            crash = scan(follower.read_new_lines())
            if crash is not None:
                return result(
                    "crashed",
                    crash.category,
                    crash.evidence,
                    f"crash found in the log ({crash.category}) after {follower.line_count} lines",
                )
            code = proc.poll()
            if code is not None:
                crash = scan(follower.read_new_lines(final=True))
                verdict = crash if crash is not None else classifier.finish(exit_code=code)
                if verdict.is_crash:
                    return result(
                        "crashed",
                        verdict.category,
                        verdict.evidence,
                        f"the server exited with code {code}: {verdict.category}",
                        code,
                    )
                last = follower.tail(1)
                return result(
                    "exited",
                    UNEXPLAINED_EXIT,
                    verdict.evidence or (last[0] if last else None),
                    f"the server exited with code {code} before it was ready",
                    code,
                )
            now = time.monotonic()
            if now >= deadline:
                crash = scan(follower.read_new_lines())
                if crash is not None:
                    return result(
                        "crashed",
                        crash.category,
                        crash.evidence,
                        f"crash found in the log ({crash.category}) at the deadline",
                    )
                return _timed_out(result, follower, ready_line_seen, probe_failure, timeout_s)
            if ready_line_seen and now >= next_probe:
                budget = max(min(health_timeout_s, deadline - now), 0.05)
                failure = _probe(client, url, readiness.probes, budget, api_key)
                if failure is None:
                    probes = readiness.probes
                    said = f"{probes[0].path} answered 200" if probes else "the ready line seen"
                    return result("ready", None, None, f"ready: {said}")
                probe_failure = failure
                next_probe = time.monotonic() + probe_interval_s
            wake = min(deadline, next_probe) if ready_line_seen else deadline
            time.sleep(max(min(poll_interval_s, wake - time.monotonic()), 0.0))


def _timed_out(
    result: Callable[[StartupStatus, str | None, str | None, str], StartupResult],
    follower: LogFollower,
    ready_line_seen: bool,
    probe_failure: str,
    timeout_s: float,
) -> StartupResult:
    last = follower.tail(1)
    if ready_line_seen:
        detail = (
            f"not ready within {timeout_s:g} s: the server reported ready but "
            f"its HTTP checks did not pass ({probe_failure})"
        )
    else:
        detail = f"not ready within {timeout_s:g} s: no ready line in {follower.line_count} lines"
    return result("timeout", "timeout", last[0] if last else None, detail)


def _check_url(url: str) -> None:
    import httpx

    try:
        scheme = httpx.URL(url).scheme
    except httpx.InvalidURL as e:
        scheme = f"invalid ({e})"
    if scheme not in ("http", "https"):
        raise ConfigError(
            f"the server URL {url!r} is not an http:// or https:// URL",
            hint="give the URL the server listens on, such as http://127.0.0.1:30000",
        )


def _probe(
    client: httpx.Client,
    url: str,
    probes: tuple[Probe, ...],
    timeout_s: float,
    api_key: str | None = None,
) -> str | None:
    """None when the server answers every readiness probe; otherwise what went wrong.

    With ``api_key`` (the server's ``--api-key``) every request carries ``Authorization: Bearer
    KEY`` (SGLang wants it on every route but ``/health*`` and ``/metrics``).
    """
    import httpx

    base = url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    for probe in probes:
        try:
            answer = client.get(f"{base}{probe.path}", timeout=timeout_s, headers=headers)
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        if probe.needs_key and answer.status_code in (401, 403):
            why = "the API key was refused" if api_key else "the server wants an API key"
            return f"GET {probe.path} answered {answer.status_code} ({why})"
        if answer.status_code != 200:
            return f"GET {probe.path} answered {answer.status_code}"
        if probe.json_object:
            try:
                body = answer.json()
            except ValueError:
                return f"GET {probe.path} did not answer JSON"
            if not isinstance(body, dict):
                return f"GET {probe.path} did not answer a JSON object"
    return None
