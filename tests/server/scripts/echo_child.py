"""Writes one line to stdout and one to stderr, then exits with the code given.

Usage: echo_child.py WORD EXIT_CODE  (the value of $AUTOTUNE_TEST_VALUE is printed too)
"""

from __future__ import annotations

import os
import sys

word, code = sys.argv[1], int(sys.argv[2])
print(f"stdout says {word}")
print(f"value={os.environ.get('AUTOTUNE_TEST_VALUE', '<unset>')}")
print(f"stdin={sys.stdin.read()!r}")
print(f"stderr says {word}", file=sys.stderr)
sys.exit(code)
