"""A tuner stand-in: launches a server tree, records its identity, then waits to be killed.

Usage: orphan_tuner.py LOG PIDFILE IDENTITY_JSON [PREFIX...]

With a launch prefix the server runs through it (``docker exec BOX``).

The test kills this process with SIGKILL, which leaves the server orphaned as a killed tuner
would; a later process then finds it from the identity record and stops it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from autotune.server import ServerProcess, identity_of

log, pidfile, record, prefix = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
tree = Path(__file__).with_name("tree_child.py")
argv = [*prefix, sys.executable, str(tree), pidfile]
proc = ServerProcess.start(argv, log_path=log, port=31999, prefix=prefix)
tmp = record + ".tmp"
Path(tmp).write_text(json.dumps(identity_of(proc).to_dict()))
os.replace(tmp, record)
while True:
    time.sleep(3600)
