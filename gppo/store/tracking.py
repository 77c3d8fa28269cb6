"""The sweep's MLflow layout: store, experiment, parent run (tag ``gppo.role=sweep``), one child
run per attempt of each cell (``gppo.role=cell``, tags of :mod:`gppo.metrics`, params = settings).

Only MLflow's client API is used (``MlflowClient``, ``log_batch``), never raw SQL. The SQLite
store is written by many processes at once (the launcher and every cell): :func:`retry_locked`
retries a write that hit "database is locked", and :meth:`Tracking.init_store` creates the
schema once, before any cell starts (concurrent first-time migrations would race).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gppo import metrics as M
from gppo.cell import Cell
from gppo.store.health import RefusalNamingClient
from gppo.store.uri import redact, resolve_tracking_uri

# MLflow's types, re-exported: the layers above name them from here (only the store imports mlflow)
if TYPE_CHECKING:
    from fastapi import FastAPI
    from mlflow import MlflowClient as MlflowClient
    from mlflow.entities import Run as Run

T = TypeVar("T")
PARAM_VALUE_MAX = 6000
TAG_VALUE_MAX = 7500
#: MLflow 3's experiment type tag; ``custom_model_development`` is "Machine learning" (model
#: training) in the UI, as opposed to ``genai_development`` (traces, GenAI overview)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


#: Errors of a store written by several processes at once that a retry resolves: SQLite's
#: locks, and MLflow's read-then-insert upserts of a run's ``latest_metrics`` and ``tags`` rows
#: (two processes adding the same new key to one run both insert it; the loser's transaction is
#: rolled back whole, so retrying it is safe and turns the insert into an update).
TRANSIENT_STORE_ERRORS = (
    "database is locked",
    "database table is locked",
    "unique constraint failed: latest_metrics.",
    "unique constraint failed: tags.",
)


def is_transient_store_error(exc: BaseException) -> bool:
    """A store error that goes away if the call is made again: a lock held by another writer,
    or another process creating a fresh store's schema at the same moment (MLflow's migrations
    then say "table ... already exists" or fail on ``alembic_version``: once the other process
    is done, the schema is there)."""
    text = str(exc).lower()
    schema_race = "alembic_version" in text or (
        "already exists" in text and ("table " in text or "index " in text)
    )
    return schema_race or any(marker in text for marker in TRANSIENT_STORE_ERRORS)


def retry_locked(fn: Callable[[], T], *, attempts: int = 30, base_s: float = 0.05) -> T:
    """Call ``fn`` again (jittered backoff, ~30 s in all) while the store reports a transient
    error (:data:`TRANSIENT_STORE_ERRORS`)."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if not is_transient_store_error(exc) or i == attempts - 1:
                raise
            time.sleep(min(2.0, base_s * 2**i) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def log_metrics(
    client: MlflowClient | RefusalNamingClient,
    run_id: str,
    values: dict[str, float],
    step: int,
    timestamp_ms: int | None = None,
) -> None:
    """Log many metrics of one step in one ``log_batch`` (retried when the store is locked): the
    launcher's one-off metrics of a run (its resources, its cost). A cell's entrypoint writes
    through :class:`gppo.store.run_logger.RunLogger` (:class:`gppo.backends.cell_run.CellRun`)."""
    from mlflow.entities import Metric

    ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
    batch = [Metric(k, float(v), ts, int(step)) for k, v in values.items()]
    for i in range(0, len(batch), 1000):
        retry_locked(partial(client.log_batch, run_id, metrics=batch[i : i + 1000]))


def log_points(
    client: MlflowClient | RefusalNamingClient,
    run_id: str,
    points: Iterable[tuple[str, float, int]],
) -> None:
    """Log ``(key, value, step)`` points of any steps, 500 per synchronous ``log_batch``."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(key, float(value), now, int(step)) for key, value, step in points]
    for i in range(0, len(batch), 500):
        client.log_batch(run_id, metrics=batch[i : i + 500], synchronous=True)


def store_client(uri: str | None = None) -> MlflowClient:
    """MLflow's client on ``uri`` (None: ``MLFLOW_TRACKING_URI``, else MLflow's default store):
    how code outside the store (a cell's entrypoint) gets one without importing mlflow."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def store_exception() -> type[Exception]:
    """The exception a store raises when it refuses a call (MLflow's ``MlflowException``)."""
    from mlflow.exceptions import MlflowException

    return MlflowException


def server_app() -> FastAPI:
    """MLflow's own tracking server and UI as an ASGI app (what ``gppo-sweep ui`` serves)."""
    from mlflow.server.fastapi_app import app

    return app


def flatten(prefix: str, value: object, out: dict[str, str]) -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}`` (lists and scalars as text)."""
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        text = "" if value is None else str(value)
        out[prefix] = text[:PARAM_VALUE_MAX]
    return out


def cell_params(cell: Cell) -> dict[str, str]:
    """The cell's settings as flat MLflow params (the compare view lines cells up on these)."""
    params: dict[str, str] = {
        "method": cell.method,
        "divergence": str(cell.divergence),
        "estimator": str(cell.estimator),
        "delta": "" if cell.delta is None else repr(cell.delta),
        "seed": str(cell.seed),
        "backend": cell.backend,
        "eval_k": str(cell.eval_k),
        "benchmarks": ",".join(cell.benchmarks),
    }
    flatten("loss", cell.loss_params, params)
    flatten(cell.backend, cell.settings, params)
    flatten(
        "resources",
        {"num_cpus": cell.resources.num_cpus, "num_gpus": cell.resources.num_gpus},
        params,
    )
    for path, value in cell.axes.items():
        params[f"axis.{path}"] = _text(value)[:PARAM_VALUE_MAX]
    return params


def sweep_filter(sweep_id: str, role: str = M.ROLE_CELL) -> str:
    """``search_runs`` filter for the runs of one role (cell or sweep) in one sweep."""
    quoted = sweep_id.replace("'", "\\'")
    return f"tags.`{M.TAG_ROLE}` = '{role}' AND tags.`{M.TAG_SWEEP_ID}` = '{quoted}'"


def cell_tags(cell: Cell, *, attempt: int, role: str = M.ROLE_CELL) -> dict[str, str]:
    """The tags every run of ``cell`` carries (coordinates, seed, attempt, domain, hash)."""
    return {
        M.TAG_ROLE: role,
        M.TAG_CELL_ID: cell.id,
        M.TAG_METHOD: cell.method,
        M.TAG_DIVERGENCE: str(cell.divergence or ""),
        M.TAG_ESTIMATOR: str(cell.estimator or ""),
        M.TAG_SEED: str(cell.seed),
        M.TAG_ATTEMPT: str(attempt),
        M.TAG_DOMAIN: str(cell.settings.get("domain", "")),
        M.TAG_BACKEND: cell.backend,
        M.TAG_CELL_HASH: cell.config_hash,
        **axis_tags(cell),
    }


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def axis_tags(cell: Cell) -> dict[str, str]:
    """A cell's axis point as tags: ``gppo.axes`` (JSON, what reports read) and one
    ``gppo.axis.<path>`` per axis (what the MLflow UI groups and filters by); none without."""
    if not cell.axes:
        return {}
    tags = {M.TAG_AXES: json.dumps(cell.axes, sort_keys=True)}
    tags.update({M.TAG_AXIS_PREFIX + p: _text(v) for p, v in cell.axes.items()})
    return tags


@contextlib.contextmanager
def _schema_lock(uri: str) -> Iterator[None]:
    """Serialise the opening (and so the schema creation) of a SQLite store across processes."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    from filelock import FileLock

    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(db) + ".init.lock"):
        yield


class Tracking:
    """MLflow access for one sweep: ``Tracking(uri).init_store()`` before any cell starts.

    ``uri`` is resolved (:func:`~gppo.store.uri.resolve_tracking_uri`: an HTTP URI's user and
    password go to MLflow's variables); a server's 401/403 on any call of ``client`` raises
    :class:`~gppo.errors.CredentialsRefused` (one line); every tag and param value written here
    has any URI's password redacted."""

    def __init__(self, uri: str | None) -> None:
        from mlflow.tracking import MlflowClient

        self.uri = resolve_tracking_uri(uri)
        # MLflow creates a fresh SQL store's schema here, and two processes migrating one SQLite
        # file at once corrupt each other's migration: ours take turns (a file lock beside the
        # database); another process doing it at the same moment is waited out (retry_locked)
        with _schema_lock(self.uri):
            client = retry_locked(lambda: MlflowClient(tracking_uri=self.uri))
        # a server that refuses the credentials (401/403): one line naming it, from any call
        self.client = RefusalNamingClient(client, self.uri)

    def init_store(self) -> None:
        """Create the store's schema now (one process, before cells start)."""
        if self.uri.startswith("sqlite:///"):
            Path(self.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        retry_locked(lambda: self.client.search_experiments(max_results=1))

    def experiment_id(self, name: str, *, create: bool = True) -> str | None:
        """The experiment's id; with ``create``, created (or marked) as a model-training
        experiment (:data:`EXPERIMENT_KIND`) so the MLflow UI lists its runs."""
        exp = retry_locked(lambda: self.client.get_experiment_by_name(name))
        if exp is not None:
            if create and EXPERIMENT_KIND_TAG not in exp.tags:  # made by an older version
                retry_locked(
                    lambda: self.client.set_experiment_tag(
                        exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND
                    )
                )
            return exp.experiment_id
        if not create:
            return None
        tags = {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
        try:
            return retry_locked(lambda: self.client.create_experiment(name, tags=tags))
        except Exception:  # created concurrently by another process
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def search(self, experiment_id: str, filter_string: str) -> list[Run]:
        runs: list[Run] = []
        token = None
        while True:
            page = retry_locked(
                partial(
                    self.client.search_runs,
                    [experiment_id],
                    filter_string,
                    max_results=5000,
                    page_token=token,
                )
            )
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def sweep_run(self, experiment_id: str, sweep_id: str, *, create: bool = True) -> str | None:
        """The sweep's parent run id (created once; set back to RUNNING on relaunch)."""
        found = self.search(experiment_id, sweep_filter(sweep_id, M.ROLE_SWEEP))
        if found:
            run = min(found, key=lambda r: (r.info.start_time, r.info.run_id))
            if create and run.info.status != "RUNNING":
                retry_locked(lambda: self.client.update_run(run.info.run_id, status="RUNNING"))
            return run.info.run_id
        if not create:
            return None
        name = sweep_id.rsplit("-", 1)[0]
        tags = {M.TAG_ROLE: M.ROLE_SWEEP, M.TAG_SWEEP_ID: sweep_id, M.TAG_SWEEP_NAME: name}
        run = retry_locked(
            lambda: self.client.create_run(experiment_id, tags=tags, run_name=sweep_id)
        )
        return run.info.run_id

    def cell_runs(self, experiment_id: str, sweep_id: str) -> dict[str, list[Run]]:
        """Every cell run of the sweep, by cell id, oldest attempt first."""
        out: dict[str, list[Run]] = {}
        for run in self.search(experiment_id, sweep_filter(sweep_id)):
            out.setdefault(run.data.tags.get(M.TAG_CELL_ID, ""), []).append(run)
        for runs in out.values():
            runs.sort(key=lambda r: (attempt_of(r), r.info.start_time))
        return out

    def create_cell_run(
        self,
        experiment_id: str,
        parent_run_id: str,
        sweep_id: str,
        cell: Cell,
        *,
        attempt: int,
        submission_id: str,
        role: str = M.ROLE_CELL,
        extra_tags: dict[str, str] | None = None,
    ) -> str:
        """A child run for one attempt of ``cell``: tags of gppo.metrics, params = settings."""
        from mlflow.entities import Param

        tags = {
            **cell_tags(cell, attempt=attempt, role=role),
            M.PARENT_RUN_TAG: parent_run_id,
            M.TAG_SWEEP_ID: sweep_id,
            M.TAG_RAY_JOB_ID: submission_id,
            **(extra_tags or {}),
        }
        tags = {k: redact(str(v)) for k, v in tags.items()}
        run = retry_locked(
            lambda: self.client.create_run(experiment_id, tags=tags, run_name=cell.id)
        )
        run_id = run.info.run_id
        params = [Param(k[:250], redact(v)) for k, v in cell_params(cell).items()]
        for i in range(0, len(params), 100):
            retry_locked(partial(self.client.log_batch, run_id, params=params[i : i + 100]))
        return run_id

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        batch = [RunTag(k, redact(str(v))[:TAG_VALUE_MAX]) for k, v in tags.items()]
        retry_locked(lambda: self.client.log_batch(run_id, tags=batch))

    def terminate(self, run_id: str, status: str) -> None:
        """End a run as FINISHED, FAILED or KILLED."""
        retry_locked(lambda: self.client.set_terminated(run_id, status))

    def get_run(self, run_id: str) -> Run:
        return retry_locked(lambda: self.client.get_run(run_id))


def int_tag(tags: dict[str, str], key: str, default: int = 0) -> int:
    """A tag read as an int; ``default`` when it is missing or not a number."""
    try:
        return int(tags[key])
    except (KeyError, ValueError):
        return default


def attempt_of(run: Run) -> int:
    """The attempt number of an ``mlflow.entities.Run`` (0 when untagged)."""
    return int_tag(run.data.tags, M.TAG_ATTEMPT)


def finished_tag(tags: dict[str, str]) -> bool:
    """True when a run's tags say its job logged the final evaluation (``gppo.finished=true``)."""
    return tags.get(M.TAG_FINISHED, "").lower() == "true"


def is_finished(run: Run) -> bool:
    """:func:`finished_tag` of an ``mlflow.entities.Run``."""
    return finished_tag(run.data.tags)


def latest_metric(run: Run, name: str) -> tuple[float, int] | None:
    """(value, step) of a run's latest value of ``name`` (``RunData.to_proto`` has the steps)."""
    for m in run.data.to_proto().metrics:
        if m.key == name:
            return m.value, m.step
    return None


def log_params(tracking: Tracking, run_id: str, params: Mapping[str, object]) -> None:
    """Log ``params`` into a run (values as text, any URI's password redacted; keys cut to
    MLflow's 250 characters)."""
    from mlflow.entities import Param

    batch = [Param(k[:250], redact(str(v))[:PARAM_VALUE_MAX]) for k, v in params.items()]
    for i in range(0, len(batch), 100):
        retry_locked(partial(tracking.client.log_batch, run_id, params=batch[i : i + 100]))


def metric_steps(
    tracking: Tracking | MlflowClient | RefusalNamingClient, run_id: str, name: str
) -> list[tuple[int, float]]:
    """``(step, value)`` of a run's metric ``name``, one per step (the latest write wins), by
    step; ``tracking``: a :class:`Tracking` or the client of one (a report's)."""
    client = tracking.client if isinstance(tracking, Tracking) else tracking
    history = retry_locked(partial(client.get_metric_history, run_id, name))
    latest = {m.step: m for m in sorted(history, key=lambda m: m.timestamp)}
    return sorted((step, float(m.value)) for step, m in latest.items())
