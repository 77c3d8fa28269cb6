"""``SweepRef``: where one sweep's results live, the handle from a launch to its report.

The launcher holds every coordinate of its sweep (store, experiment, parent run, the run of each
cell) and hands them over in :attr:`gppo.sweep.result.LaunchResult.ref`;
:func:`gppo.analysis.write_report` reads the sweep through it without searching the store again.
:func:`find_sweep` builds one for a sweep that ran earlier (``gppo-sweep report SPEC``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gppo import metrics as M
from gppo.errors import SweepNotFound
from gppo.store.uri import resolve_tracking_uri


@dataclass(frozen=True)
class SweepRef:
    """One sweep's coordinates in MLflow.

    Attributes:
        sweep_id: the ``gppo.sweep_id`` tag of the parent run and of every cell run.
        tracking_uri: the MLflow tracking URI (resolved, never None).
        experiment_id: the experiment that holds the sweep's runs.
        parent_run_id: the sweep's parent run (tag ``gppo.role=sweep``).
        run_ids: cell id -> the run of its latest attempt (those the launcher knew; may be empty).
    """

    sweep_id: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str | None = None
    run_ids: Mapping[str, str] = field(default_factory=dict)


def find_sweep(
    sweep_id: str, tracking_uri: str | None = None, *, experiment: str | None = None
) -> SweepRef:
    """The :class:`SweepRef` of a sweep in the store, from its parent run.

    ``experiment`` (the spec's ``experiment``) narrows the lookup to that experiment; without it
    the parent run is looked up by its tags in every active experiment (``report --sweep-id``).
    Raises :class:`SweepNotFound` when the store has no parent run of ``sweep_id``.
    """
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    from gppo.store.records import active_experiment_ids
    from gppo.store.tracking import sweep_filter

    uri = resolve_tracking_uri(tracking_uri)
    client = MlflowClient(tracking_uri=uri)
    where = f"experiment {experiment!r}" if experiment else "any experiment"
    if experiment is not None:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            raise SweepNotFound(f"{uri}: no experiment {experiment!r} (sweep {sweep_id!r})")
        experiment_ids = [exp.experiment_id]
    else:
        experiment_ids = active_experiment_ids(client)
    runs = (
        client.search_runs(
            experiment_ids,
            sweep_filter(sweep_id, M.ROLE_SWEEP),
            ViewType.ACTIVE_ONLY,
            order_by=["attributes.start_time ASC"],
        )
        if experiment_ids
        else []
    )
    if not runs:
        raise SweepNotFound(f"{uri}: no sweep {sweep_id!r} in {where} (launch it first)")
    parent = runs[0]
    return SweepRef(sweep_id, uri, parent.info.experiment_id, parent.info.run_id)
