"""What a trial records in Optuna (user attrs) so that any later tuner can take it over.

* ``gppo.cell_id``, ``gppo.run_id`` (MLflow child run), ``gppo.job_id`` (Ray submission id),
  ``gppo.ray_address``: where the trial's job and values live;
* ``gppo.owner`` ``{host, pid, started, token}`` and ``gppo.heartbeat`` (unix time): which tuner
  drives it, and when that tuner last showed signs of life;
* ``gppo.failure``: why a trial failed (one line).

A RUNNING trial is *orphaned* when its owner is gone: on the same host, its pid is dead (or was
reused by another process); on another host, its heartbeat is older than ``stale_after_s``.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

CELL_ID = "gppo.cell_id"
RUN_ID = "gppo.run_id"
JOB_ID = "gppo.job_id"
RAY_ADDRESS = "gppo.ray_address"
OWNER = "gppo.owner"
HEARTBEAT = "gppo.heartbeat"
FAILURE = "gppo.failure"
CONFIG = "gppo.config"


def _process_started(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:
        return None


@dataclass(frozen=True)
class Owner:
    """Identity of one tuner run (a process may run several tuners one after another)."""

    host: str
    pid: int
    started: float | None
    token: str

    @classmethod
    def me(cls) -> Owner:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, _process_started(pid), uuid.uuid4().hex[:12])

    def as_attr(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "started": self.started, "token": self.token}


def owner_alive(
    attrs: dict[str, Any], *, me: Owner, stale_after_s: float, started_at: float | None
) -> bool:
    """Whether the tuner that owns a RUNNING trial is still alive (see the module doc)."""
    owner = attrs.get(OWNER)
    beat = attrs.get(HEARTBEAT, started_at)
    if not isinstance(owner, dict):  # crashed between ask and recording: only time tells
        return beat is not None and time.time() - float(beat) < stale_after_s
    if owner.get("token") == me.token:
        return True
    if owner.get("host") == me.host:
        pid = int(owner.get("pid", -1))
        if pid == me.pid:  # an earlier tuner in this same process: it is over
            return False
        started = _process_started(pid)
        if started is None:
            return False
        recorded = owner.get("started")
        return recorded is None or abs(started - float(recorded)) < 1.0
    return beat is not None and time.time() - float(beat) < stale_after_s
