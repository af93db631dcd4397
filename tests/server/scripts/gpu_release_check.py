"""End-to-end check on a GPU machine: hold GPU memory in a child, stop it, time the release.

Usage: python tests/server/scripts/gpu_release_check.py [--mib 2048] [--device 0]

Starts gpu_hold.py through ServerProcess, waits for it to hold the memory, reads what NVML
sees, stops the child (it ignores SIGTERM, so SIGKILL is needed) and waits until the GPU's
memory is back to its baseline. Prints the figures; exit code 0 when the memory was released.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from autotune.server import GpuMonitor, LogFollower, ServerProcess


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=2048)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()

    monitor = GpuMonitor(indices=[args.device])
    if not monitor.available():
        print(f"GPU release check skipped: {monitor.reason}")
        return 2
    baseline = monitor.snapshot()
    print(f"baseline: GPU {args.device} uses {baseline[0].used_mib:.0f} MiB")
    hold = Path(__file__).with_name("gpu_hold.py")
    log = Path(tempfile.mkdtemp(prefix="gpu-release-")) / "hold.log"
    argv = [sys.executable, str(hold), str(args.mib), str(args.device)]
    with ServerProcess.start(argv, log_path=log, term_timeout_s=1.0) as proc:
        follower = LogFollower(log, start_offset=proc.log_offset)
        deadline = time.monotonic() + args.timeout
        while not any("holding" in line for line in follower.read_new_lines()):
            if proc.poll() is not None or time.monotonic() > deadline:
                print("the child did not take the memory; log:")
                print(log.read_text(errors="replace"))
                return 1
            time.sleep(0.1)
        held = monitor.snapshot()[0]
        print(
            f"held: GPU {args.device} uses {held.used_mib:.0f} MiB "
            f"(+{held.used_mib - baseline[0].used_mib:.0f}); compute pids {sorted(held.pids)}; "
            f"child pid {proc.pid} seen by NVML: {proc.pid in held.pids}"
        )
        pids = proc.tree_pids()
        outcome = proc.stop()
    print(
        f"stopped in {outcome.elapsed_s:.2f} s, forced={outcome.forced}, "
        f"signal={outcome.signal}, survivors={list(outcome.survivors)}"
    )
    released = monitor.wait_released(pids | set(outcome.pids), baseline, args.timeout)
    print(f"released={released.released} after {released.waited_s:.2f} s: {released.detail}")
    monitor.close()
    return 0 if released.released else 1


if __name__ == "__main__":
    sys.exit(main())
