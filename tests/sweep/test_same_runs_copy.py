"""A follower's copied run is whole or absent (issue 57, item 11): a launcher killed mid-copy
leaves a run the next launch deletes and copies again, never one it fails with its lead's job.

Without Ray: a SQLite store, the launch's own reconcile and settle steps, a stand-in for Ray's
Jobs API (it knows no job, as after a killed launcher's head is gone)."""

from __future__ import annotations

import types

import pytest

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.store import same_runs as store_same_runs
from gppo.store.tracking import Tracking
from gppo.sweep.running.attempts import DONE, PENDING
from gppo.sweep.running.dispatcher import Dispatcher
from gppo.sweep.running.identical_cells import SameRuns
from gppo.sweep.session import reconcile

from .conftest import write_spec
from .jobs_api import JobsApi

pytestmark = pytest.mark.slow  # MLflow's SQLite store

GRID = {"divergences": ["tv", "chi2"], "estimators": ["mc"]}  # chi2/mc = tv/mc


class Killed(BaseException):
    """The launcher's SIGKILL, mid-copy."""


def sweep(tmp_path):
    plan = load_plan(write_spec(tmp_path, None, name="copy", grid=GRID))
    tracking = Tracking(plan.spec.tracking.uri)
    tracking.init_store()
    exp = tracking.experiment_id(plan.spec.experiment)
    parent = tracking.sweep_run(exp, plan.sweep_id)
    ctx = types.SimpleNamespace(
        plan=plan, tracking=tracking, experiment_id=exp, parent_run_id=parent,
        sweep_id=plan.sweep_id,
    )  # fmt: skip
    cluster = types.SimpleNamespace(client=JobsApi, address="http://127.0.0.1:1")
    disp = Dispatcher(
        cluster, tracking, experiment_id=exp, parent_run_id=parent, sweep_id=plan.sweep_id
    )
    return plan, ctx, disp


def finished_lead(ctx, cell) -> str:
    tracking = ctx.tracking
    run_id = tracking.create_cell_run(
        ctx.experiment_id, ctx.parent_run_id, ctx.sweep_id, cell, attempt=1,
        submission_id="gppo-lead-a1",
    )  # fmt: skip
    for step in (1, 2, 3):
        tracking.client.log_metric(run_id, M.TRAIN_SCORE, 0.1 * step, step=step)
    tracking.client.log_metric(run_id, M.eval_domain_metric(cell.eval_k), 0.5, step=3)
    tracking.set_tags(run_id, {M.TAG_FINISHED: "true"})
    tracking.terminate(run_id, "FINISHED")
    return run_id


def test_a_copy_cut_off_by_a_kill_is_deleted_and_copied_whole_by_the_next_launch(
    tmp_path, monkeypatch
):
    plan, ctx, disp = sweep(tmp_path)
    same = SameRuns(plan.cells)
    ((lead, follower),) = same.groups
    lead_run = finished_lead(ctx, lead)

    # the first launcher copies the lead's histories, a batch at a time, and is killed mid-copy
    monkeypatch.setattr(store_same_runs, "BATCH", 1)
    real = ctx.tracking.client.log_batch
    batches = []

    def log_batch(run_id, metrics=(), **kw):
        if metrics:
            batches.append(run_id)
            if len(batches) == 2:
                raise Killed
        return real(run_id, metrics=metrics, **kw)

    monkeypatch.setattr(ctx.tracking.client, "log_batch", log_batch)
    states = reconcile(ctx, disp, list(plan.cells))
    with pytest.raises(Killed):
        same.settle(ctx, states, lambda _e: None)
    monkeypatch.setattr(ctx.tracking.client, "log_batch", real)
    (cut,) = ctx.tracking.cell_runs(ctx.experiment_id, ctx.sweep_id)[follower.id]
    assert cut.info.status == "RUNNING" and cut.data.tags[M.TAG_COPYING] == "true"
    assert cut.data.tags[M.TAG_RAY_JOB_ID] == "gppo-lead-a1"  # what a relaunch took for its job

    # the next launch: the cut copy is gone before the runs are read, then copied again, whole
    assert same.drop_partial(ctx) == [cut.info.run_id]
    states = reconcile(ctx, disp, list(plan.cells))
    assert states[follower.id].state is PENDING and states[follower.id].run_id is None
    assert states[lead.id].state is DONE
    same.settle(ctx, states, lambda _e: None)
    assert states[follower.id].state is DONE
    (whole,) = ctx.tracking.cell_runs(ctx.experiment_id, ctx.sweep_id)[follower.id]
    tags, metrics = whole.data.tags, whole.data.metrics
    assert whole.info.status == "FINISHED" and M.TAG_COPYING not in tags
    assert M.TAG_FAILURE not in tags and tags[M.TAG_SAME_RUNS] == lead_run
    assert metrics == ctx.tracking.get_run(lead_run).data.metrics
    history = ctx.tracking.client.get_metric_history(whole.info.run_id, M.TRAIN_SCORE)
    assert [m.step for m in history] == [1, 2, 3]
    assert same.drop_partial(ctx) == []  # a whole copy is kept
