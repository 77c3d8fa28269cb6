"""Files built once on a machine, however many processes ask for them at the same moment (the
cells of a launch starting together): the verl backend's smoke and testbed assets and the testbed's
training streams, under ``$GPPO_CACHE_DIR``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


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
