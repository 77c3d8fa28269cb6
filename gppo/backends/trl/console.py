"""The TRL job's own lines on stdout, each written whole.

A data-parallel cell runs several processes on one stdout (unbuffered under ``accelerate``);
``print`` writes a line's text and its newline in two calls, so another process's line could land
between them and glue two lines into one. :func:`say` writes ``[trl] <text>\\n`` in one call.
"""

from __future__ import annotations

import sys


def say(text: str) -> None:
    """Write ``[trl] text`` and its newline to stdout in one call, then flush."""
    sys.stdout.write(f"[trl] {text}\n")
    sys.stdout.flush()
