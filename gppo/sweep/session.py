"""Open a sweep's side of the world: store, experiment, parent run, state dir, cluster."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gppo.grid.plan import Plan
from gppo.store.tracking import Tracking, resolve_tracking_uri, state_root
from gppo.sweep.cluster import Cluster, ensure_cluster


def sweep_state_dir(plan: Plan) -> Path:
    """``.gppo/<sweep id>`` next to the sweep's tracking store (cluster.json, launch.lock)."""
    return state_root(resolve_tracking_uri(plan.spec.tracking.uri)) / plan.sweep_id


def store_exists(uri: str) -> bool:
    """False for a local SQLite/file store that was never created (read-only commands)."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).exists()
    if uri.startswith("file://") or "://" not in uri:
        return Path(uri.removeprefix("file://")).exists()
    return True


@dataclass
class SweepContext:
    """What the dispatcher needs for one sweep."""

    plan: Plan
    tracking: Tracking
    experiment_id: str
    parent_run_id: str
    state_dir: Path
    cluster: Cluster | None


def open_sweep(
    plan: Plan, *, address: str | None = None, start_cluster: bool = True
) -> SweepContext:
    """Create the store's schema, the experiment and the parent run; attach/start Ray."""
    tracking = Tracking(plan.spec.tracking.uri)
    tracking.init_store()
    exp = tracking.experiment_id(plan.spec.experiment)
    assert exp is not None
    parent = tracking.sweep_run(exp, plan.sweep_id)
    assert parent is not None
    state_dir = sweep_state_dir(plan)
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster = ensure_cluster(address or plan.spec.ray.address, state_dir, start=start_cluster)
    return SweepContext(plan, tracking, exp, parent, state_dir, cluster)


def read_sweep(plan: Plan) -> tuple[Tracking, str] | None:
    """(tracking, experiment id) of an existing sweep, touching nothing; None if absent."""
    uri = resolve_tracking_uri(plan.spec.tracking.uri)
    if not store_exists(uri):
        return None
    tracking = Tracking(uri)
    exp = tracking.experiment_id(plan.spec.experiment, create=False)
    return None if exp is None else (tracking, exp)


def runs_by_cell(tracking: Tracking, experiment_id: str, sweep_id: str) -> dict[str, list[Any]]:
    return tracking.cell_runs(experiment_id, sweep_id)
