"""Shared helpers: a real SQLite MLflow store populated with the sweep layout of gppo/store/tracking.py (parent run, one child run per attempt)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from helpers import make_cell
from mlflow import MlflowClient
from mlflow.entities import Metric

from gppo import metrics as M
from gppo.store.ref import SweepRef
from gppo.store.tracking import cell_tags

DATA = Path(__file__).parent / "data"


class Store:
    def __init__(
        self, tmp_path: Path, sweep_id: str = "demo-1234abcd", template: Path | None = None
    ) -> None:
        if template is not None:  # a migrated empty store: skips MLflow's ~5 s schema setup
            shutil.copy(template, tmp_path / "mlflow.db")
        self.uri = f"sqlite:///{tmp_path}/mlflow.db"
        self.client = MlflowClient(tracking_uri=self.uri)
        self.exp = self.client.create_experiment("demo", artifact_location=str(tmp_path / "art"))
        self.sweep_id = sweep_id
        parent = self.client.create_run(
            self.exp,
            tags={M.TAG_ROLE: M.ROLE_SWEEP, M.TAG_SWEEP_ID: sweep_id, M.TAG_SWEEP_NAME: "demo"},
        )
        self.parent = parent.info.run_id
        self.t0 = int(time.time() * 1000)

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
        base_name: bool = False,
        curves: dict[str, list[float]] | None = None,
        k: int = 8,
    ) -> str:
        cell = make_cell(
            divergence, estimator, method=method, seed=seed, settings={"domain": domain}, eval_k=k
        )
        # the production writer's tags (gppo.store.tracking.cell_tags), never hand-written ones
        tags = {
            **cell_tags(cell, attempt=attempt),
            M.PARENT_RUN_TAG: self.parent,
            M.TAG_SWEEP_ID: self.sweep_id,
        }
        if finished:
            tags[M.TAG_FINISHED] = "true"
        self.t0 += 1000
        run = self.client.create_run(self.exp, start_time=self.t0, tags=tags)
        rid = run.info.run_id
        ts = self.t0
        batch = []
        last = 0
        for key, values in (curves or {}).items():
            batch += [Metric(key, v, ts, i + 1) for i, v in enumerate(values)]
            last = max(last, len(values))
        for b, s in (base or {}).items():
            batch.append(Metric(M.eval_metric(b, k), s, ts, 0))
            if base_name:
                batch.append(Metric(M.eval_base_metric(b, k), s, ts, 0))
        for b, s in (scores or {}).items():
            batch.append(Metric(M.eval_metric(b, k), s, ts + 1, max(last, 10)))
        if batch:
            self.client.log_batch(rid, metrics=batch)
        if status != "RUNNING":
            self.client.set_terminated(rid, status=status, end_time=self.t0 + 500)
        return rid


@pytest.fixture(scope="session")
def empty_store_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments(max_results=1)
    return path


@pytest.fixture
def store(tmp_path: Path, empty_store_db: Path) -> Store:
    return Store(tmp_path, template=empty_store_db)
