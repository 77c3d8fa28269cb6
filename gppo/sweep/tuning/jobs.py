"""Trials as Ray jobs through the sweep's own machinery (the tuner's only Ray and MLflow writes).

A study is a sweep with id ``<study>-tune``: the same store (:class:`gppo.store.tracking.Tracking`),
experiment (``tracking.experiment`` or the spec name) and parent run (TAG_ROLE=sweep, plus
TAG_STUDY_NAME), the same cluster (:func:`gppo.sweep.cluster.ensure_cluster`: an address,
``RAY_ADDRESS``, or a detached local head recorded in ``.gppo/<study>-tune/`` beside the store,
which outlives a killed tuner so a rerun re-attaches to its jobs), and the same
:class:`gppo.sweep.dispatcher.Dispatcher`: the backend's job for the trial's cell, one MLflow child
run per trial (TAG_ROLE=trial, TAG_TRIAL_NUMBER, TAG_STUDY_NAME; TAG_ATTEMPT = the trial number,
which keeps Ray submission ids unique), ``MLFLOW_TRACKING_URI``/``MLFLOW_RUN_ID`` in the job's env.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from gppo import metrics as M
from gppo.backends.base import get_backend
from gppo.cell import Cell
from gppo.store.tracking import Tracking, resolve_tracking_uri, state_root
from gppo.sweep.cluster import ensure_cluster, stop_local_head
from gppo.sweep.dispatcher import Attempt, Dispatcher, SubmissionExists

PENDING, RUNNING, SUCCEEDED = "PENDING", "RUNNING", "SUCCEEDED"
#: the job id is not known to the cluster (never submitted, or a new cluster)
MISSING = "MISSING"
#: the cluster's Jobs API does not answer
UNREACHABLE = "UNREACHABLE"
ACTIVE = (PENDING, RUNNING)
#: tag holding the Optuna state a trial ended in (COMPLETE / PRUNED / FAIL)
TAG_TRIAL_STATE = "gppo.trial_state"


def study_sweep_id(study_name: str) -> str:
    """The sweep id of a study (``<study>-tune``; never of the ``<name>-<hash8>`` grid form)."""
    return f"{study_name}-tune"


def study_state_dir(tracking_uri: str | None, study_name: str) -> Path:
    """``.gppo/<study>-tune`` beside the tracking store (the local head's cluster.json)."""
    return state_root(resolve_tracking_uri(tracking_uri)) / study_sweep_id(study_name)


class TrialDispatch:
    """Open the study's store, parent run and cluster; submit, poll, stop and end trial jobs."""

    def __init__(
        self, tracking_uri: str | None, experiment: str, study_name: str, address: str | None
    ) -> None:
        self.study_name = study_name
        self.sweep_id = study_sweep_id(study_name)
        self.tracking = Tracking(tracking_uri)
        self.tracking.init_store()
        exp = self.tracking.experiment_id(experiment)
        assert exp is not None
        self.experiment_id = exp
        parent = self.tracking.sweep_run(exp, self.sweep_id)
        assert parent is not None
        self.parent_run_id = parent
        self.tracking.set_tags(parent, {M.TAG_STUDY_NAME: study_name})
        self.state_dir = study_state_dir(tracking_uri, study_name)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        cluster = ensure_cluster(address, self.state_dir)
        assert cluster is not None
        self.cluster = cluster
        self.dispatcher = Dispatcher(
            cluster,
            self.tracking,
            experiment_id=exp,
            parent_run_id=parent,
            sweep_id=self.sweep_id,
        )

    @property
    def uri(self) -> str:
        return self.tracking.uri

    @property
    def client(self) -> Any:
        return self.tracking.client

    @property
    def address(self) -> str:
        return self.cluster.address

    def submit(self, cell: Cell, number: int, params: dict[str, Any]) -> Attempt:
        """Create trial ``number``'s child run and submit its cell's job."""
        job = get_backend(cell.backend).job(cell)
        tags = {M.TAG_TRIAL_NUMBER: str(number), M.TAG_STUDY_NAME: self.study_name}
        attempt = number
        for _ in range(5):
            try:
                att = self.dispatcher.submit(
                    cell, job, attempt=attempt, role=M.ROLE_TRIAL, extra_tags=tags
                )
                break
            except SubmissionExists:
                attempt += 1000  # an id left on the cluster by an earlier study of this name
        else:
            raise RuntimeError(f"no free Ray submission id for trial {number}")
        from mlflow.entities import Param

        batch = [Param(f"trial.{k}"[:250], str(v)) for k, v in sorted(params.items())]
        if batch:
            self.client.log_batch(att.run_id, params=batch)
        return att

    def status(self, sid: str) -> str:
        try:
            status = self.dispatcher.status(sid)
        except Exception:
            return UNREACHABLE
        return MISSING if status is None else status

    def stop(self, sid: str, wait_s: float = 5.0) -> None:
        with contextlib.suppress(Exception):
            self.dispatcher.stop(sid, wait_s=wait_s)

    def logs_tail(self, sid: str, lines: int = 5) -> str:
        return self.dispatcher.logs_tail(sid, lines)

    def end_run(self, run_id: str, sid: str, state: str, note: str = "") -> None:
        """End a trial's run: COMPLETE → FINISHED, PRUNED → KILLED, FAIL → FAILED (+ log tail)."""
        self.tracking.set_tags(run_id, {TAG_TRIAL_STATE: state})
        if state == "COMPLETE":
            self.tracking.terminate(run_id, "FINISHED")
            return
        tail = self.logs_tail(sid, 20) if sid else ""
        self.tracking.set_tags(run_id, {M.TAG_FAILURE: f"{note}\n{tail}".strip()})
        self.tracking.terminate(run_id, "KILLED" if state == "PRUNED" else "FAILED")

    def close(self, *, any_running: bool, complete: bool) -> None:
        """End the parent run and stop a local head this study started, once nothing runs."""
        if any_running:
            return
        self.tracking.terminate(self.parent_run_id, "FINISHED" if complete else "KILLED")
        if self.cluster.local:
            stop_local_head(self.state_dir)
