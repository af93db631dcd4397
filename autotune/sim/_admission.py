"""When the simulated scheduler closes the batch of its next step, and when that step begins.

SGLang's scheduler admits waiting requests at step boundaries: what arrived while a step ran
joins the next step, as one prefill batch that pauses decoding until it is done. A closed-loop
benchmark client sends its next request when one completes. Over HTTP that request reaches the
server some time after the completion: the last chunk travels to the client, which records it
and builds and sends the next request. That takes a fraction of a millisecond per request on an
idle machine, but a Python client that must replace 64 requests finishing together (fixed
output lengths keep a closed loop in lockstep) needs tens to hundreds of milliseconds on a busy
2-core machine. The model's virtual client (:meth:`~autotune.sim.SimModel.evaluate`) sends them
at the instant of the completion. Served as they come, the replacements trickle into many small
prefill steps that each pause all decoding, and split the running requests into groups that
stay out of step for the rest of the run: at concurrency 64 on the H100 profile the throughput
measured over HTTP fell 13 to 16% below the model's, and further on a busy machine.

Modelling choice, the *admission window*: a step's batch stays open a while after the boundary at
which the step begins, and what arrives meanwhile joins it as if it had arrived at the boundary.

- After a step in which ``k`` requests finished while others still run, the batch stays open
  until ``k`` new requests have arrived (a closed-loop client's replacements) or none arrived
  for ``gap_s``.
- After a step in which ``k > 1`` requests finished and left nothing decoding (a closed-loop
  batch that finished in step; requests may still wait for a slot), waiting holds no decoding
  up: the first replacement may take up to ``window_s`` and each next one up to
  ``patient_gap_s``.
- A window that closes without any arrival means the client stopped replacing requests (the end
  of its run, or an open-loop client): later windows do not wait until a request arrives again.
- A request that arrives at an idle engine (a single finished request's replacement too) opens
  a burst: the step begins at its arrival and its prefill batch takes whatever arrives until
  none came for ``burst_gap_s`` (10 ms, within the duration of a prefill step, so a lone
  request's first token is not delayed). What arrives while prefill steps run is prefilled next
  (prefill goes first in SGLang); when two or more requests came, the burst's first decode step
  waits until none arrived for ``patient_gap_s``, so that a client's burst decodes in step, as
  the virtual client's requests (all sent at once) do.
- Other windows stay open ``window_s`` at most.
- The step begins at the boundary (the end of the previous step, or the first arrival after
  idle) and ends its modelled duration later. A loop that spent longer than that waiting (or
  was held up by a busy CPU) delivers the step at once and keeps the schedule: the steps after
  it are delivered early until the loop has caught up, as long as it is at most ``max_lag_s``
  behind; beyond that it gives the time up and goes on from now.
- Requests that arrive after the window wait for the next boundary, as in SGLang.

So a closed-loop client's replacements are served as the virtual client's are, and a benchmark
over HTTP measures the model's throughput rather than the client's reaction time. The price:
an open-loop client's request that arrives within a window is served from the boundary, up to
the window's length earlier in the model's time than it arrived; and while the loop catches up,
tokens come in bursts, so inter-token latencies spread (their mean holds). A real deployment
pays the client's reaction time, which is small next to a step at low concurrency but can
desynchronise a large closed-loop batch as described above.
"""

from __future__ import annotations

import asyncio

#: Longest time (seconds) a step's batch stays open after its boundary.
ADMISSION_WINDOW_S = 1.0
#: A batch waiting for replacements closes when none arrived for this long (seconds).
ADMISSION_GAP_S = 0.05
#: A batch opened by an arrival at an idle engine closes when none followed for this long.
BURST_GAP_S = 0.01
#: The same where waiting holds no decoding up: a finished batch's replacements, the rest of a
#: burst before its first decode step (seconds).
PATIENT_GAP_S = 0.25
#: Furthest (seconds) the serving loop may fall behind its schedule and still catch up.
MAX_LAG_S = 5.0


class Admission:
    """Arrivals at the serving loop and the admission window (see the module docstring)."""

    def __init__(
        self,
        *,
        window_s: float = ADMISSION_WINDOW_S,
        gap_s: float = ADMISSION_GAP_S,
        burst_gap_s: float = BURST_GAP_S,
        patient_gap_s: float = PATIENT_GAP_S,
        max_lag_s: float = MAX_LAG_S,
    ) -> None:
        self.window_s = window_s
        self.gap_s = gap_s
        self.burst_gap_s = burst_gap_s
        self.patient_gap_s = patient_gap_s
        self.max_lag_s = max_lag_s
        #: Requests submitted so far.
        self.arrivals = 0
        #: Event-loop time of the latest arrival.
        self.last_arrival = float("-inf")
        self._replacing = True
        self._event = asyncio.Event()
        self._closed = False

    def arrived(self, now: float) -> None:
        """A request was submitted at event-loop time ``now``."""
        self.arrivals += 1
        self.last_arrival = now
        self._replacing = True
        self._event.set()

    def close(self) -> None:
        """End every wait at once (server shutdown)."""
        self._closed = True
        self._event.set()

    async def replacements(self, opened: float, count: int, *, idle: bool) -> None:
        """Wait for the replacements of ``count`` requests that finished in the step delivered
        at event-loop time ``opened``; ``idle``: nothing else is decoding."""
        if not self._replacing:
            return
        if idle and count > 1:
            got = await self._gather(opened, count, self.window_s, self.patient_gap_s, None)
        else:
            got = await self._gather(opened, count, self.gap_s, self.gap_s, self.window_s)
        self._replacing = got > 0

    async def burst(self, opened: float, *, decoding: bool = False) -> None:
        """Wait for the rest of a burst that began with an arrival at event-loop time ``opened``
        at an idle engine: until no request arrived for ``burst_gap_s`` (before its first
        prefill) or ``patient_gap_s`` (``decoding``: before its first decode step)."""
        gap = self.patient_gap_s if decoding else self.burst_gap_s
        close = opened + self.window_s
        while not self._closed:
            if not await self._next_arrival(min(close, max(opened, self.last_arrival) + gap)):
                return

    async def _gather(
        self,
        opened: float,
        count: int | None,
        first_s: float,
        gap_s: float,
        limit_s: float | None,
    ) -> int:
        """Wait until ``count`` requests (None: any number) arrived after ``opened``, the first
        within ``first_s`` and each next within ``gap_s``, all within ``limit_s`` (None: no
        limit); how many arrived."""
        base = self.arrivals
        close = float("inf") if limit_s is None else opened + limit_s
        while not self._closed and (count is None or self.arrivals - base < count):
            latest = opened + first_s if self.arrivals == base else self.last_arrival + gap_s
            if not await self._next_arrival(min(close, latest)):
                break
        return self.arrivals - base

    def deadline(self, begin: float | None, duration_s: float, now: float) -> float:
        """When a step that begins at ``begin`` (None: now) is due (see :func:`next_deadline`)."""
        return next_deadline(begin, duration_s, now, max_lag_s=self.max_lag_s)

    async def _next_arrival(self, until: float) -> bool:
        """Wait for the next arrival until event-loop time ``until``; whether one came."""
        timeout = until - asyncio.get_running_loop().time()
        if timeout <= 0:
            return False
        self._event.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            return False
        return not self._closed


def next_deadline(
    previous: float | None, duration_s: float, now: float, *, max_lag_s: float = 0.0
) -> float:
    """When a step is due: the previous deadline (None: now) plus the step's duration.

    A deadline already past is delivered at once; the schedule goes on from it while it is at
    most ``max_lag_s`` behind ``now`` (the loop catches up), else from now.
    """
    due = (now if previous is None else previous) + duration_s
    return due if due >= now - max_lag_s else now
