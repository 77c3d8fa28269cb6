"""Open a sweep's side of the world: store, experiment, parent run, state dir, cluster.

A tuning study is a sweep too (:func:`open_session` with its own sweep id): the same store,
parent run, state dir, cluster and :class:`~gppo.sweep.dispatcher.Dispatcher`; only the grid
:class:`~gppo.grid.load.Plan` (the cells known up front) is the launcher's own
(:class:`SweepContext`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gppo.grid.load import Plan
from gppo.grid.schema import LocalHead
from gppo.store.tracking import Tracking
from gppo.store.uri import resolve_tracking_uri, state_root
from gppo.sweep.cluster import Cluster, ensure_cluster, local_head_for, stop_local_head
from gppo.sweep.dispatcher import Dispatcher


def state_dir_of(tracking_uri: str | None, sweep_id: str) -> Path:
    """``.gppo/<sweep id>`` next to the tracking store (cluster.json, launch.lock)."""
    return state_root(resolve_tracking_uri(tracking_uri)) / sweep_id


def sweep_state_dir(plan: Plan) -> Path:
    """``.gppo/<sweep id>`` next to the sweep's tracking store (cluster.json, launch.lock)."""
    return state_dir_of(plan.spec.tracking.uri, plan.sweep_id)


def store_exists(uri: str) -> bool:
    """False for a local SQLite/file store that was never created (read-only commands)."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).exists()
    if uri.startswith("file://") or "://" not in uri:
        return Path(uri.removeprefix("file://")).exists()
    return True


@dataclass
class Session:
    """One sweep's (or study's) store coordinates, state dir and cluster."""

    sweep_id: str
    tracking: Tracking
    experiment_id: str
    parent_run_id: str
    state_dir: Path
    cluster: Cluster | None

    def dispatcher(self) -> Dispatcher:
        """The :class:`Dispatcher` of this sweep's jobs (needs a cluster)."""
        assert self.cluster is not None
        return Dispatcher(
            self.cluster,
            self.tracking,
            experiment_id=self.experiment_id,
            parent_run_id=self.parent_run_id,
            sweep_id=self.sweep_id,
        )

    def close(self, status: str, meanwhile: Callable[[], None] | None = None) -> None:
        """End the parent run as ``status`` and stop the local head this sweep started;
        ``meanwhile`` (e.g. the sweep's report) runs while the head shuts down (a second or two
        of its processes exiting), in this thread."""
        self.tracking.terminate(self.parent_run_id, status)
        stopping = None
        if self.cluster is not None and self.cluster.local:
            stopping = threading.Thread(target=stop_local_head, args=(self.state_dir,))
            stopping.start()
        try:
            if meanwhile is not None:
                meanwhile()
        finally:
            if stopping is not None:
                stopping.join()


@dataclass
class SweepContext(Session):
    """What the launcher needs for one grid sweep: the session and its plan."""

    plan: Plan


def open_session(
    tracking_uri: str | None,
    experiment: str,
    sweep_id: str,
    *,
    address: str | None = None,
    start_cluster: bool = True,
    local_head: LocalHead | None = None,
) -> Session:
    """Create the store's schema, the experiment and the parent run; attach/start Ray."""
    tracking = Tracking(tracking_uri)
    tracking.init_store()
    exp = tracking.experiment_id(experiment)
    assert exp is not None
    parent = tracking.sweep_run(exp, sweep_id)
    assert parent is not None
    state_dir = state_dir_of(tracking_uri, sweep_id)
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster = ensure_cluster(address, state_dir, start=start_cluster, local_head=local_head)
    return Session(sweep_id, tracking, exp, parent, state_dir, cluster)


def open_sweep(
    plan: Plan, *, address: str | None = None, start_cluster: bool = True
) -> SweepContext:
    """:func:`open_session` for a grid sweep (its spec's store, experiment and cluster)."""
    spec = plan.spec
    session = open_session(
        spec.tracking.uri,
        spec.experiment,
        plan.sweep_id,
        address=address or spec.ray.address,
        start_cluster=start_cluster,
        local_head=local_head_for(spec, plan.cells),
    )
    return SweepContext(**vars(session), plan=plan)


def read_sweep(plan: Plan) -> tuple[Tracking, str] | None:
    """(tracking, experiment id) of an existing sweep, touching nothing; None if absent."""
    uri = resolve_tracking_uri(plan.spec.tracking.uri)
    if not store_exists(uri):
        return None
    tracking = Tracking(uri)
    exp = tracking.experiment_id(plan.spec.experiment, create=False)
    return None if exp is None else (tracking, exp)
