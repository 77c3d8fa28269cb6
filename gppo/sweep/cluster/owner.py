"""Who drives a sweep or a study: one launcher or tuner process, recognisable from another process.

A record ``{host, pid, started, token}`` (:meth:`Owner.as_attr`) is written where other processes
read it (the lease param of a sweep's parent run, a trial's Optuna user attrs). On the same host
the holder is alive while its pid runs with the recorded start time (a reused pid has another);
from another host only a heartbeat can tell (:func:`alive`).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any


def pid_alive(pid: int | None) -> bool:
    """True while process ``pid`` runs on this host (a zombie child counts as dead)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as dead
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def process_started(pid: int) -> float | None:
    """The process's start time (unix seconds), or None when there is no such process."""
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:  # none (NoSuchProcess), or not ours to read (AccessDenied)
        return None


#: overrides the host name an owner record names (:meth:`Owner.me`)
HOST_ID_ENV = "GPPO_HOST_ID"


@dataclass(frozen=True)
class Owner:
    """Identity of one launcher or tuner run (a process may run several one after another)."""

    host: str
    pid: int
    started: float | None
    token: str

    @classmethod
    def me(cls) -> Owner:
        """This process, on this host (``$GPPO_HOST_ID``, else the hostname: set it where
        machines or containers share a hostname but not their process tables)."""
        pid = os.getpid()
        host = os.environ.get(HOST_ID_ENV) or socket.gethostname()
        return cls(host, pid, process_started(pid), uuid.uuid4().hex[:12])

    def as_attr(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "started": self.started, "token": self.token}


def alive(record: object, *, me: Owner, beat: float | None, stale_s: float) -> bool:
    """Whether the owner ``record`` (:meth:`Owner.as_attr`) still runs.

    On this host: its pid runs, is not a zombie, and started when the record says; elsewhere (or
    with no record at all): its last heartbeat ``beat`` is younger than ``stale_s``."""
    if isinstance(record, dict) and record.get("host") == me.host and record.get("pid"):
        pid = int(record["pid"])
        if not pid_alive(pid):
            return False
        started, recorded = process_started(pid), record.get("started")
        return started is not None and (recorded is None or abs(started - float(recorded)) < 1.0)
    return beat is not None and time.time() - float(beat) < stale_s
