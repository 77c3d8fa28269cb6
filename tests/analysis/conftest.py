"""Shared helpers: a real SQLite MLflow store holding a sweep as the product writes it: the
parent run and one child run per attempt from :class:`gppo.store.tracking.Tracking` (what the
launcher calls), each run's metrics and finished tag from :class:`gppo.backends.cell_run.CellRun`
(what every backend's cell process calls)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import make_cell
from mlflow import MlflowClient

from gppo import metrics as M
from gppo.backends.cell_run import CellRun
from gppo.cell import axis_suffix, cell_id
from gppo.store.state import SweepRef
from gppo.store.tracking import Tracking
from gppo.sweep.running.dispatcher import submission_id

DATA = Path(__file__).parent / "data"


class Store:
    """One experiment (``demo``) with the parent run of sweep ``sweep_id``; :meth:`cell` adds
    one attempt's run to the current sweep, :meth:`sweep` switches to (or creates) another."""

    def __init__(
        self, tmp_path: Path, sweep_id: str = "demo-1234abcd", template: Path | None = None
    ) -> None:
        if template is not None:  # a migrated empty store: skips MLflow's ~5 s schema setup
            shutil.copy(template, tmp_path / "mlflow.db")
        self.uri = f"sqlite:///{tmp_path}/mlflow.db"
        self.tracking = Tracking(self.uri)
        self.client = self.tracking.client
        # artifacts under tmp_path (MLflow's default root is the working directory); the
        # launcher's own call then finds the experiment and marks it as it marks its own
        self.client.create_experiment("demo", artifact_location=str(tmp_path / "art"))
        exp = self.tracking.experiment_id("demo")
        assert exp is not None
        self.exp: str = exp
        self.sweep(sweep_id)

    def sweep(self, sweep_id: str) -> str:
        """Make ``sweep_id`` the current sweep (its parent run created once, as a launch does);
        returns the sweep id it replaces (``""`` the first time)."""
        previous = getattr(self, "sweep_id", "")
        parent = self.tracking.sweep_run(self.exp, sweep_id)
        assert parent is not None
        self.sweep_id, self.parent = sweep_id, parent
        return previous

    @property
    def ref(self) -> SweepRef:
        """The sweep's handle, as ``LaunchResult.ref`` gives it."""
        return SweepRef(self.sweep_id, self.uri, self.exp, self.parent)

    def cell(
        self,
        method: str,
        divergence: str | None,
        estimator: str | None,
        *,
        seed: int = 0,
        domain: str = "math",
        attempt: int = 1,
        status: str = "FINISHED",
        finished: bool = True,
        scores: dict[str, float] | None = None,
        base: dict[str, float] | None = None,
        eval_base: bool = True,
        curves: dict[str, list[float]] | None = None,
        k: int = 8,
        axes: dict[str, object] | None = None,
    ) -> str:
        """One attempt's run of a cell, ended with MLflow ``status`` 0.5 s after it started:
        ``base`` (the step-0 evaluation), ``curves`` (training metrics at steps 1, 2, ...),
        ``scores`` (the final evaluation, at step 10 or the curves' last) and, with
        ``finished``, the finished tag. ``eval_base=False``: the step-0 evaluation without its
        ``eval_base/...`` names (a run that broke the protocol, or one older than it).
        ``axes``: the cell's axis point (its id and tags as the expansion gives them)."""
        point = dict(axes or {})
        suffix = axis_suffix(point)
        grid = method == "gppo"
        cid = (
            cell_id(str(divergence), estimator, seed, suffix)
            if grid
            else cell_id(method, None, seed, suffix)
        )
        cell = make_cell(
            divergence, estimator, method=method, seed=seed, settings={"domain": domain},
            eval_k=k, axes=point, id=cid,
        )  # fmt: skip
        rid = self.tracking.create_cell_run(
            self.exp,
            self.parent,
            self.sweep_id,
            cell,
            attempt=attempt,
            submission_id=submission_id(self.sweep_id, cell.id, attempt),
        )
        run = CellRun(self.client, rid, eval_k=k)
        if base and eval_base:
            run.log_evaluation(base, step=0)
        elif base:
            run.log({M.eval_metric(b, k): s for b, s in base.items()}, 0)
        last = max((len(values) for values in (curves or {}).values()), default=0)
        for step in range(1, last + 1):
            values = {key: v[step - 1] for key, v in (curves or {}).items() if len(v) >= step}
            run.log_train_step(step, values)
        final = max(last, 10)
        if scores:
            run.log_evaluation(scores, step=final)
        run.flush()
        if finished:
            run.finish(final)
        if status != "RUNNING":
            start = self.tracking.get_run(rid).info.start_time
            self.client.set_terminated(rid, status=status, end_time=start + 500)
        return rid


@pytest.fixture(scope="session")
def empty_store_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments(max_results=1)
    return path


@pytest.fixture
def store(tmp_path: Path, empty_store_db: Path) -> Store:
    return Store(tmp_path, template=empty_store_db)
