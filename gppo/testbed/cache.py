"""Where this machine keeps what gppo builds, and building each such file once.

:func:`cache_root` is the one rule for the cache's place, used by every backend and the testbed:
the self-built base models (``bases/``), the base's step-0 evaluations (``bases/evals/``), the
testbed's Hugging Face assets (``hf-testbed/``), verl's smoke assets (``verl-cpu-smoke/``) and
the default checkpoint root (``checkpoints/<backend>/``). :func:`build_once` builds a file once
however many processes ask for it at the same moment (the cells of a launch starting together).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

#: the environment variable that moves the cache
CACHE_ENV = "GPPO_CACHE_DIR"


def cache_root() -> Path:
    """``$GPPO_CACHE_DIR`` (``~`` expanded) when set and not empty, else
    ``~/.cache/gppo-sweep``. Every user takes its own sub-directory of it, so setting the variable
    moves all of them together."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "gppo-sweep"


def build_once(done: Path, build: Callable[[], None]) -> None:
    """Call ``build`` unless ``done`` exists. Under a file lock beside it (``<done>.lock``), so of
    callers arriving together the first builds and the others wait, then find ``done``;
    ``build`` must write ``done`` last (a build that dies half-way leaves no ``done``, and the
    next caller builds again)."""
    from filelock import FileLock

    if done.exists():
        return
    done.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(done) + ".lock"):
        if not done.exists():
            build()
