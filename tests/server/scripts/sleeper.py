"""Sleeps until signalled.

Usage: sleeper.py [--ignore-term | --exit-on-term CODE]
"""

from __future__ import annotations

import signal
import sys
import time

if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif "--exit-on-term" in sys.argv:
    code = int(sys.argv[sys.argv.index("--exit-on-term") + 1])
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(code))
print("sleeping", flush=True)
while True:
    time.sleep(3600)
