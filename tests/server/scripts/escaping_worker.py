"""A server whose worker escapes: an intermediate process starts a worker in a new session
(setsid) with an empty environment (no launch token), writes the worker's pid, and exits; the
worker is then nobody's child but the kernel's nearest subreaper. The main process sleeps.

argv: PIDFILE
"""

import subprocess
import sys
import time

pidfile = sys.argv[1]
if len(sys.argv) > 2 and sys.argv[2] == "intermediate":
    worker = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"],
        start_new_session=True,
        env={},
    )
    with open(pidfile, "w") as f:
        f.write(f"{worker.pid}\n")
    sys.exit(0)
subprocess.run([sys.executable, __file__, pidfile, "intermediate"], check=True)
print("ready", flush=True)
while True:
    time.sleep(1)
