"""What an attempt is billed and what the budget counts (issue 57, items 5-7), without Ray: a
cell's threads reserved and billed, a resumed attempt re-attached by a relaunch counted once, and
a relaunch's re-attached runs counted against the budget.

The dispatcher runs on a SQLite store with a stand-in for Ray's Jobs API and a clock the test
moves."""

from __future__ import annotations

import os
import time
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from gppo import metrics as M
from gppo.backends.base import Job, get_backend
from gppo.cell import Resources
from gppo.grid import load_plan
from gppo.store.cost import Hours, Spent, attempt_cost, resource_metrics, run_hours
from gppo.store.tracking import Tracking
from gppo.sweep import launch as launch_module
from gppo.sweep.cluster.connect import local_head_for
from gppo.sweep.launch import Launcher
from gppo.sweep.planning.forecast import forecast
from gppo.sweep.running.attempts import PENDING, RUNNING, CellState
from gppo.sweep.running.dispatcher import DONE, FAILED, Dispatcher

from .jobs_api import JobsApi


def local_plan(tmp_path: Path, local: dict[str, Any] | None = None, **extra: Any):
    spec = {
        "name": "billed",
        "backend": "local",
        "local": {"domain": "math", "steps": 10, **(local or {})},
        "grid": {"divergences": ["tv", "kl"], "estimators": ["mc"]},
        "seeds": 2,
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db"},
        "ray": {"max_concurrent": 2},
        **extra,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_plan(path)


def hour_runs(plan):
    """The plan's forecast with every run one hour long (comparable runs, no pre-flight)."""
    return forecast(plan, walls=lambda _u, keys: {k: [3600.0] for k in keys})


# -- item 5: a cell's threads are reserved and billed ---------------------------------------------
def test_a_testbed_cell_of_four_threads_reserves_and_bills_four_cpus(tmp_path):
    plan = local_plan(tmp_path, {"num_threads": 4})
    job = get_backend("local").job(plan.cells[0])
    assert job.resources.num_cpus == 4
    hours = run_hours(attempt_cost(resource_metrics(job.resources), 3600.0))
    assert hours is not None and hours.cpu == 4.0
    est, _, _ = hour_runs(plan).total()
    assert est.cpu == pytest.approx(4.0 * len(plan.cells))
    one = local_plan(tmp_path, {"num_threads": 1})
    assert get_backend("local").job(one.cells[0]).resources.num_cpus == 1
    more = local_plan(tmp_path, {"num_threads": 2}, ray={"resources": {"num_cpus": 3}})
    assert get_backend("local").job(more.cells[0]).resources.num_cpus == 3  # the spec's, larger


def test_a_trl_cpu_cell_reserves_a_cpu_per_thread_of_each_process(tmp_path):
    spec = {
        "name": "trl-billed",
        "backend": "trl",
        "trl": {"steps": 1, "num_processes": 2, "num_threads": 3},
        "grid": {"divergences": ["tv"], "estimators": ["mc"]},
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db"},
    }
    (tmp_path / "trl.yaml").write_text(yaml.safe_dump(spec))
    plan = load_plan(tmp_path / "trl.yaml")
    assert get_backend("trl").job(plan.cells[0]).resources.num_cpus == 6


def test_a_local_head_fits_a_cell_of_more_threads_than_the_machine_has(tmp_path):
    threads = (os.cpu_count() or 1) + 2
    plan = local_plan(tmp_path, {"num_threads": threads})
    head = local_head_for(plan.spec, plan.cells)
    assert head.num_cpus is not None and head.num_cpus >= threads
    assert local_head_for(local_plan(tmp_path).spec, plan.cells[:0]).num_cpus is None


# -- item 6: a resumed attempt re-attached by a relaunch is counted once ----------------------------
@pytest.fixture
def clock(monkeypatch):
    """``time.time`` under the test's control (MLflow's run start times follow it too)."""
    now = [time.time()]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


def store(tmp_path: Path):
    """A plan's cell, its store and a maker of dispatchers (a launcher's; a relaunch makes its
    own) on one stand-in Jobs API."""
    plan = local_plan(tmp_path)
    tracking = Tracking(plan.spec.tracking.uri)
    tracking.init_store()
    exp = tracking.experiment_id("billed")
    assert exp is not None
    parent = tracking.sweep_run(exp, plan.sweep_id)
    assert parent is not None
    api = JobsApi()

    def dispatcher() -> Dispatcher:
        cluster = types.SimpleNamespace(client=lambda: api, address="http://127.0.0.1:1")
        return Dispatcher(
            cluster, tracking, experiment_id=exp, parent_run_id=parent, sweep_id=plan.sweep_id
        )

    return plan.cells[0], tracking, api, dispatcher


@pytest.mark.slow  # MLflow's SQLite store
def test_a_resumed_attempt_re_attached_by_a_relaunch_is_billed_its_own_time_once(tmp_path, clock):
    cell, tracking, _api, dispatcher = store(tmp_path)
    job = Job(argv=("true",), resources=Resources(num_cpus=2))
    disp = dispatcher()
    first = disp.submit(cell, job, attempt=1)  # the run's start
    clock[0] += 100
    assert disp.finish(first, "FAILED") == FAILED  # 100 s held
    clock[0] += 100  # the retry's backoff: nothing held
    second = disp.submit(cell, job, attempt=2, run_id=first.run_id)  # resumes the same run (verl)
    clock[0] += 50  # ... and the launcher is killed here; a relaunch re-attaches to the attempt
    run = tracking.get_run(first.run_id)
    tracking.set_tags(run.info.run_id, {M.TAG_FINISHED: "true"})
    again = dispatcher().attach(cell, run)
    assert again.submitted_at == second.submitted_at
    assert dispatcher().finish(again, "SUCCEEDED") == DONE
    metrics = tracking.get_run(first.run_id).data.metrics
    assert metrics[M.COST_WALL_S] == pytest.approx(150.0)  # 100 + 50, not 100 + 250
    assert metrics[M.COST_CPU_HOURS] == pytest.approx(2 * 150.0 / 3600)
    assert again.hours is not None and again.hours.wall_s == pytest.approx(50.0)  # the budget's


@pytest.mark.slow  # MLflow's SQLite store
def test_a_job_that_ended_while_no_launcher_watched_is_billed_to_its_end(tmp_path, clock):
    cell, tracking, api, dispatcher = store(tmp_path)
    att = dispatcher().submit(cell, Job(argv=("true",), resources=Resources(num_cpus=1)), attempt=1)
    api.ended[att.submission_id] = clock[0] + 30  # the launcher was killed; the job ran 30 s
    clock[0] += 600  # the relaunch, ten minutes on
    again = dispatcher().attach(cell, tracking.get_run(att.run_id))
    dispatcher().finish(again, "FAILED")
    assert tracking.get_run(att.run_id).data.metrics[M.COST_WALL_S] == pytest.approx(30.0)


# -- item 7: a relaunch's re-attached runs count against the budget ---------------------------------
def test_the_budget_counts_the_runs_a_relaunch_re_attached(tmp_path, monkeypatch):
    plan = local_plan(tmp_path, budget={"cpu_hours": 2.5})
    ids = [c.id for c in plan.cells]
    # the first launch was killed with ids[0] running: no cost logged yet, its cell has a run
    monkeypatch.setattr(launch_module, "forecast", hour_runs)
    monkeypatch.setattr(
        launch_module, "sweep_spent", lambda *_a: Spent(Hours(), frozenset(ids[:1]))
    )
    cells = {c.id: CellState(c, state=RUNNING if c.id == ids[0] else PENDING) for c in plan.cells}
    ctx = types.SimpleNamespace(tracking=types.SimpleNamespace(uri="unused"), experiment_id="0")
    keeper = Launcher(plan)._budget(ctx, cells)  # type: ignore[arg-type]
    assert keeper is not None
    # 1 h going + 1 h fits 2.5 h; a third hour does not
    assert [keeper.admit(i) is None for i in ids[1:]] == [True, False, False]
    assert "3.00 CPU-h > budget 2.50 CPU-h" in keeper.left[ids[2]]
    keeper.ended(ids[0], Hours(0.25, 0, 900, 1))  # the re-attached run ended: its cost replaces it
    assert keeper.admit(ids[2]) is None


@pytest.mark.slow  # MLflow's SQLite store
def test_a_finished_run_whose_job_ended_unwatched_is_billed_to_its_end(tmp_path, clock):
    """Found by the independent check (tests/crosscheck, the kill -9 combinations): a run whose
    job finished while no launcher watched was ended FINISHED by the relaunch with no cost at
    all (Table 1's cost column empty, ``status`` short of its runs). It is billed to the job's
    end as Ray recorded it."""
    from gppo.sweep.session import settle_orphan

    cell, tracking, api, dispatcher = store(tmp_path)
    att = dispatcher().submit(cell, Job(argv=("true",), resources=Resources(num_cpus=2)), attempt=1)
    tracking.set_tags(att.run_id, {M.TAG_FINISHED: "true"})
    api.ended[att.submission_id] = clock[0] + 30  # the launcher was killed; the job ran 30 s
    api.get_job_status = lambda sid: types.SimpleNamespace(value="SUCCEEDED")
    clock[0] += 600  # the relaunch, ten minutes on
    disp, run = dispatcher(), tracking.get_run(att.run_id)
    ctx = types.SimpleNamespace(tracking=tracking)
    job = settle_orphan(ctx, disp, disp.attach(cell, run), run, driver="launcher")  # type: ignore[arg-type]
    assert job == "SUCCEEDED"
    done = tracking.get_run(att.run_id)
    assert done.info.status == "FINISHED"
    assert done.data.metrics[M.COST_WALL_S] == pytest.approx(30.0)
    assert done.data.metrics[M.COST_CPU_HOURS] == pytest.approx(2 * 30.0 / 3600)
