"""``python -m autotune`` is the ``autotune`` command."""

from __future__ import annotations

import sys

from autotune.cli import main

if __name__ == "__main__":
    sys.exit(main())
