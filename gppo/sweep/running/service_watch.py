"""A launch's (or a study's) watch on the two services its jobs need: the Ray cluster and the
tracking server.

One :class:`~gppo.sweep.running.outage.OutageClock` each: a cluster that does not answer (a status round
failing, a submission refused for the cluster's own state) is waited on for
``ray.unreachable_timeout_s``, a tracking server for ``tracking.unreachable_timeout_s`` (the
launcher, or the tuner, holds submissions and run endings meanwhile); then :class:`Watch` raises
:class:`~gppo.errors.ClusterUnreachable` / :class:`~gppo.errors.TrackingUnreachable`, leaving the
runs RUNNING and the jobs alone for the next launch (or tuner) to re-attach to or settle. A local
head this sweep started that has exited ends the launch at once, and so does a full store disk
(:class:`~gppo.errors.StoreFull`). The launcher (:mod:`gppo.sweep.launch`) and the tuner
(:mod:`gppo.sweep.tuning.runner`) each hold one; only what their lines say is left differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gppo.errors import ClusterUnreachable, StoreFull, TrackingUnreachable
from gppo.store.health import (
    DISK_FULL_SIGNS,
    is_disk_full,
    is_unreachable_error,
    tracking_unreachable,
)
from gppo.sweep.cluster.owner import pid_alive
from gppo.sweep.running.attempts import reason
from gppo.sweep.running.outage import OutageClock
from gppo.sweep.session import Session, SweepContext


@dataclass(frozen=True)
class Left:
    """What a give-up line says is left behind, and what to do: on an outage past its limit
    (``outage``), when the local head has exited (``head``), on a full store disk
    (``disk_full``)."""

    outage: str
    head: str
    disk_full: str


#: a launch's
LAUNCH = Left(
    outage="its jobs and their runs are left as they are: launch again once it answers",
    head="their runs are left for a relaunch, which starts a new head and reruns every "
    "unfinished cell",
    disk_full="the launch stopped, its jobs and runs are left as they are: free space on that "
    "disk and launch again (finished cells are kept)",
)


def cluster_silent(ctx: SweepContext, timeout_s: float, exc: OSError) -> ClusterUnreachable:
    """The error for a cluster whose Jobs API did not answer at all (refused, timed out)."""
    where = ctx.cluster.address if ctx.cluster is not None else "?"
    return ClusterUnreachable(
        f"{ctx.plan.source}: the Ray cluster at {where} did not answer "
        f"(ray.unreachable_timeout_s = {timeout_s:g}; last error: {reason(exc)}); {LAUNCH.outage}"
    )


class Watch:
    """The cluster's and the tracking server's outage clocks of one launch or study.

    Args:
        ctx: the sweep's (or study's) session: its cluster and tracking store.
        source: what the lines it raises with start with (the spec file).
        cluster_timeout_s: ``ray.unreachable_timeout_s``.
        tracking_timeout_s: ``tracking.unreachable_timeout_s``.
        on_change: told ``(kind, clock)`` when either service goes away (``"outage"``) or
            comes back (``"recovered"``).
        left: what its give-up lines say is left, and what to do (a launch's: :data:`LAUNCH`).
    """

    def __init__(
        self,
        ctx: Session,
        source: str,
        cluster_timeout_s: float,
        tracking_timeout_s: float,
        on_change: Callable[[str, OutageClock], None],
        *,
        left: Left = LAUNCH,
    ) -> None:
        self.ctx, self.source, self.left = ctx, source, left
        where = ctx.cluster.address if ctx.cluster is not None else "?"
        self.cluster = OutageClock("cluster", where, cluster_timeout_s, on_change)
        self.tracking = OutageClock("tracking", ctx.tracking.uri, tracking_timeout_s, on_change)

    def head_gone(self) -> bool:
        """The cluster is a local head this sweep started, and its process has exited."""
        c = self.ctx.cluster
        return c is not None and c.local and bool(c.pid) and not pid_alive(c.pid)

    def check_cluster(self) -> None:
        """Raise :class:`ClusterUnreachable` once the cluster has been silent for too long, or at
        once when it is the local head this sweep started and its process has exited."""
        if self.head_gone():
            raise ClusterUnreachable(
                f"{self.source}: the local Ray head this sweep started (pid "
                f"{self.ctx.cluster.pid}) has exited, and its jobs with it; {self.left.head}"  # type: ignore[union-attr]  # head_gone(): a local head
            )
        self.cluster.check(ClusterUnreachable, self.source, self.left.outage)

    def tracking_answers(self) -> bool:
        """Probe the tracking server (its outage clock says when it goes away and comes back);
        give up (raise :class:`TrackingUnreachable`) after ``tracking.unreachable_timeout_s``."""
        answers = self.tracking.observe(tracking_unreachable(self.ctx.tracking.uri))
        self.tracking.check(TrackingUnreachable, self.source, self.left.outage)
        return answers

    def store_error(self, exc: Exception) -> bool:
        """An error of a round's store step: raise :class:`StoreFull` for a full disk; for a
        server that did not answer, count it on the tracking clock (the same step is retried
        next round) and say True; for anything else say False (the caller re-raises it)."""
        if is_disk_full(exc):
            raise StoreFull(self.disk_full_line(exc)) from None
        if not is_unreachable_error(exc):
            return False
        self.tracking.failed(reason(exc))
        self.tracking.check(TrackingUnreachable, self.source, self.left.outage)
        return True

    def disk_full_line(self, exc: BaseException) -> str:
        found = next((s for s in DISK_FULL_SIGNS if s in str(exc)), "no space left on device")
        return (
            f"{self.source}: the tracking store's disk is full ({self.ctx.tracking.uri}: {found});"
            f" {self.left.disk_full}"
        )
