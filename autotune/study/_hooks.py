"""The test hook that pauses a tuner at a named phase of its set-up or recovery.

The kill-safety tests set :data:`PAUSE_ENV` to a phase name and kill the tuner while it sleeps
there; nothing happens unless the variable names the phase.
"""

from __future__ import annotations

import os
import sys
import time

#: Test hook: ``AUTOTUNE_TEST_PAUSE_AT=<phase>`` makes ``study start`` print
#: ``autotune-test: paused at <phase>`` on stderr and sleep there, so a test can kill the tuner
#: at that instant of the set-up. Phases: ``created`` (study row only), ``space`` (space
#: attributes written), ``target``, ``baseline`` (the baseline queued), ``queued`` (all first
#: trials queued, not yet marked complete); and, on ``resume``, ``requeued`` (a stale trial's
#: re-run queued, the trial not yet failed); in a trial or a confirmation run, ``launched`` (its
#: server started, its pid not yet recorded: only the record stored before the launch, with the
#: launch's token, can find it).
PAUSE_ENV = "AUTOTUNE_TEST_PAUSE_AT"


def pause_at(phase: str) -> None:
    """The test hook of :data:`PAUSE_ENV` (nothing unless that variable names ``phase``)."""
    if os.environ.get(PAUSE_ENV) == phase:
        print(f"autotune-test: paused at {phase}", file=sys.stderr, flush=True)
        time.sleep(600)
