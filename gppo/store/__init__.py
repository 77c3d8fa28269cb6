"""The store: every MLflow read and write of a sweep, in one place.

``import gppo.store`` imports nothing heavy; MLflow loads only when a module below is used.

- :mod:`.uri`: the tracking URI (spec, ``MLFLOW_TRACKING_URI``, or ``sqlite:///mlflow.db``), what
  kind of store it names (local path or SQLite, database, tracking server), and the state dir
  ``.gppo/`` next to a local store.
- :mod:`.tracking`: :class:`~gppo.store.tracking.Tracking`, the sweep's layout: experiment, parent
  run (``gppo.role=sweep``), one child run per attempt of a cell (tags: ``cell_tags``; params:
  ``cell_params``), lookups (``sweep_run``, ``cell_runs``, ``is_finished``, ``latest_metric``),
  and ``retry_locked`` for a store written by many processes at once.
- :mod:`.run_logger`: what a job's entrypoint uses to write its metrics (buffered ``log_batch``).
- :mod:`.state`: a cell's state (:class:`~gppo.store.state.State`, derived from its runs) and
  :class:`~gppo.store.state.SweepRef`, one sweep's coordinates (URI, experiment, parent run, each
  cell's run), the handle from ``LaunchResult.ref`` to the report.
- :mod:`.records`: the reports' bulk read: every run of a sweep as a light ``RunRecord`` (a SQL
  fast path or ``search_runs``), lookups over them, and ``find_sweep`` (a sweep's ``SweepRef``).

Public MLflow APIs only (``MlflowClient``, ``RunData.to_proto``, MLflow's table models through a
read-only SQLAlchemy engine on the store's own URI).
"""

from gppo.registry import lazy_exports

_EXPORTS = {
    "SweepRef": "state",
    "SweepNotFound": "records",
    "find_sweep": "records",
    "Tracking": "tracking",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
