"""What a trial records in Optuna (user attrs) so that any later tuner can take it over.

* ``gppo.cell_id``, ``gppo.run_id`` (MLflow child run), ``gppo.job_id`` (Ray submission id),
  ``gppo.ray_address``: where the trial's job and values live;
* ``gppo.owner`` (:meth:`gppo.sweep.cluster.owner.Owner.as_attr`) and ``gppo.heartbeat`` (unix time):
  which tuner drives it, and when that tuner last showed signs of life;
* ``gppo.failure``: why a trial failed (one line).

A RUNNING trial is *orphaned* when its owner is gone (:func:`owner_alive`).
"""

from __future__ import annotations

from typing import Any

from gppo import metrics as M
from gppo.sweep.cluster.owner import Owner, alive

CELL_ID = M.TAG_CELL_ID  # the same name as the cell run's tag
RUN_ID = "gppo.run_id"
JOB_ID = "gppo.job_id"
RAY_ADDRESS = "gppo.ray_address"
OWNER = "gppo.owner"
HEARTBEAT = "gppo.heartbeat"
FAILURE = M.TAG_FAILURE  # as the attempt run's tag
CONFIG = "gppo.config"

__all__ = ["Owner", "owner_alive"]


def owner_alive(
    attrs: dict[str, Any], *, me: Owner, stale_after_s: float, started_at: float | None
) -> bool:
    """Whether the tuner that owns a RUNNING trial still runs: this tuner does; an earlier tuner
    of this same process does not; else :func:`gppo.sweep.cluster.owner.alive` (pid on this host, the
    heartbeat, or the trial's start when it crashed before recording an owner)."""
    owner = attrs.get(OWNER)
    if isinstance(owner, dict):
        if owner.get("token") == me.token:
            return True
        if owner.get("host") == me.host and owner.get("pid") == me.pid:
            return False
    return alive(owner, me=me, beat=attrs.get(HEARTBEAT, started_at), stale_s=stale_after_s)
