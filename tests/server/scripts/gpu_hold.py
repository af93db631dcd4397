"""Holds GPU memory until killed; ignores SIGTERM, so stopping it needs SIGKILL.

Usage: gpu_hold.py MIB [DEVICE]   (prints "holding N MiB on cuda:D" once the memory is taken)
"""

from __future__ import annotations

import signal
import sys
import time

import torch

mib, device = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0
signal.signal(signal.SIGTERM, signal.SIG_IGN)
block = torch.empty(mib * 1024 * 1024, dtype=torch.uint8, device=f"cuda:{device}")
block.fill_(1)
torch.cuda.synchronize()
print(f"holding {mib} MiB on cuda:{device}", flush=True)
while True:
    time.sleep(3600)
