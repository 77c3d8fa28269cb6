"""End-to-end sweeps on real local Ray and a real SQLite MLflow store (probe backend)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.sweep.launch import Launcher
from gppo.sweep.monitor.commands import sweep_status

from .conftest import write_spec

pytestmark = pytest.mark.slow  # every test here starts Ray or a launcher


def runs_of(plan, uri):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(plan.spec.experiment)
    return client, client.search_runs([exp.experiment_id], max_results=1000)


def cell_runs(runs):
    out = {}
    for r in runs:
        if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL:
            out.setdefault(r.data.tags[M.TAG_CELL_ID], []).append(r)
    return out


#: shell syntax in a setting reaches the job as one literal argv element, never a shell
EVIL = "$(touch pwned1); touch pwned2 && `touch pwned3` | touch pwned4 'q\" \\n"
INJECT = {"tv-mc-s0": {"probe": {"note": EVIL}}}


def test_sweep_end_to_end_then_resume_and_change_one_cell(tmp_path, ray_cluster):
    spec = write_spec(tmp_path, ray_cluster.address, name="e2e", seeds=2, overrides=INJECT)
    plan = load_plan(spec)
    result = Launcher(plan, poll_s=0.5).run()
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client, runs = runs_of(plan, uri)
    parents = [r for r in runs if r.data.tags.get(M.TAG_ROLE) == M.ROLE_SWEEP]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent = parents[0]
    assert parent.data.tags[M.TAG_SWEEP_ID] == plan.sweep_id
    by_cell = cell_runs(runs)
    assert sorted(by_cell) == sorted(c.id for c in plan.cells)
    for cell in plan.cells:
        (run,) = by_cell[cell.id]
        t = run.data.tags
        assert run.info.status == "FINISHED" and t[M.TAG_FINISHED] == "true"
        assert t[M.PARENT_RUN_TAG] == parent.info.run_id
        assert t[M.TAG_SWEEP_ID] == plan.sweep_id and t[M.TAG_METHOD] == "gppo"
        assert t[M.TAG_DIVERGENCE] == cell.divergence and t[M.TAG_ESTIMATOR] == "mc"
        assert t[M.TAG_SEED] == str(cell.seed) and t[M.TAG_ATTEMPT] == "1"
        assert t[M.TAG_CELL_HASH] == cell.config_hash and t[M.TAG_DOMAIN] == "probe"
        assert t[M.TAG_RAY_JOB_ID] == f"gppo-{plan.sweep_id}-{cell.id}-a1"
        p = run.data.params
        assert p["divergence"] == cell.divergence and p["seed"] == str(cell.seed)
        assert float(p["delta"]) == cell.delta and p["probe.steps"] == "2"
        assert p["loss.estimator"] == "mc"
        hist = client.get_metric_history(run.info.run_id, M.TRAIN_SCORE)
        assert sorted(m.step for m in hist) == [1, 2]
        assert run.data.metrics[M.eval_domain_metric(8)] == 0.5

    # the injected setting came through verbatim and ran nothing
    (tv0,) = by_cell["tv-mc-s0"]
    assert tv0.data.tags["probe.note"] == EVIL and tv0.data.params["probe.note"] == EVIL
    assert not list(tmp_path.rglob("pwned*")) and not list(Path("/tmp").glob("pwned*"))

    # status reads it back
    rows = {r.cell: r for r in sweep_status(plan)}
    assert all(r.state == "done" and r.step == 2 for r in rows.values())

    # relaunching the same spec: same sweep, nothing reruns
    t0 = time.monotonic()
    again = Launcher(load_plan(spec), poll_s=0.5).run()
    assert again.ok and time.monotonic() - t0 < 10
    _, runs2 = runs_of(plan, uri)
    assert len(runs2) == len(runs)

    # change one cell: only that cell reruns, in a new run with a new hash
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="e2e",
        seeds=2,
        overrides={**INJECT, "kl-mc-s1": {"probe": {"steps": 3}}},
    )
    plan2 = load_plan(spec)
    assert plan2.sweep_id == plan.sweep_id
    assert plan2.cell("tv-mc-s0").config_hash == plan.cell("tv-mc-s0").config_hash
    assert Launcher(plan2, poll_s=0.5).run().ok
    _, runs3 = runs_of(plan, uri)
    by3 = cell_runs(runs3)
    assert {k: len(v) for k, v in by3.items()} == {
        "tv-mc-s0": 1, "tv-mc-s1": 1, "kl-mc-s0": 1, "kl-mc-s1": 2,
    }  # fmt: skip
    new = max(by3["kl-mc-s1"], key=lambda r: r.info.start_time)
    assert new.data.tags[M.TAG_ATTEMPT] == "2" and new.info.status == "FINISHED"
    assert new.data.tags[M.TAG_CELL_HASH] == plan2.cell("kl-mc-s1").config_hash


def test_fail_once_then_succeed_and_always_fail(tmp_path, ray_cluster):
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="retry",
        grid={"divergences": ["tv", "kl", "chi2"], "estimators": ["mc"]},
        overrides={
            "kl-mc": {"probe": {"fail_times": 1}},
            "chi2-mc": {"probe": {"always_fail": True}},
        },
        retries={"max": 2, "backoff_s": 0.2},
        ray={"address": ray_cluster.address, "max_concurrent": 3, "resources": {"num_cpus": 0.5}},
    )
    plan = load_plan(spec)
    result = Launcher(plan, poll_s=0.5).run()
    states = {k: c.state for k, c in result.cells.items()}
    assert states == {"tv-mc-s0": "done", "kl-mc-s0": "done", "chi2-mc-s0": "failed"}
    assert not result.ok
    _, runs = runs_of(plan, f"sqlite:///{tmp_path}/mlflow.db")
    by = cell_runs(runs)
    kl = sorted(by["kl-mc-s0"], key=lambda r: int(r.data.tags[M.TAG_ATTEMPT]))
    assert [r.info.status for r in kl] == ["FAILED", "FINISHED"]
    assert [r.data.tags[M.TAG_RAY_JOB_ID][-3:] for r in kl] == ["-a1", "-a2"]
    chi = by["chi2-mc-s0"]
    assert len(chi) == 3 and all(r.info.status == "FAILED" for r in chi)
    assert all("probe failing on purpose" in r.data.tags[M.TAG_FAILURE] for r in chi)
    # the backoff between attempts grew (0.2 s, then 0.4 s)
    starts = sorted(r.info.start_time for r in chi)
    assert starts[2] - starts[1] >= 400
    rows = {r.cell: r.state for r in sweep_status(plan)}
    assert rows == {"tv-mc-s0": "done", "kl-mc-s0": "done", "chi2-mc-s0": "failed"}


def test_job_stopped_from_outside(tmp_path, ray_cluster):
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="stopped",
        overrides={"kl-mc": {"probe": {"steps": 60, "sleep_s": 0.5}}},
    )
    plan = load_plan(spec)
    sid = f"gppo-{plan.sweep_id}-kl-mc-s0-a1"
    client = ray_cluster.client()

    def stopper():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if client.get_job_status(sid).value == "RUNNING":
                    time.sleep(1.0)
                    client.stop_job(sid)
                    return
            except RuntimeError:
                pass
            time.sleep(0.3)

    th = threading.Thread(target=stopper)
    th.start()
    result = Launcher(plan, poll_s=0.5).run()
    th.join()
    assert result.cells["tv-mc-s0"].state == "done"
    assert result.cells["kl-mc-s0"].state == "stopped"
    _, runs = runs_of(plan, f"sqlite:///{tmp_path}/mlflow.db")
    (kl,) = cell_runs(runs)["kl-mc-s0"]
    assert kl.info.status == "KILLED"
    assert not [r for r in runs if r.info.status == "RUNNING"]


def test_backend_that_reuses_its_run_on_retry(tmp_path, ray_cluster):
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="reuse",
        backend="probe_reuse",
        probe_reuse={"steps": 1, "fail_times": 1, "marker_dir": str(tmp_path / "m")},
        grid={"divergences": ["kl"], "estimators": ["mc"]},
    )
    plan = load_plan(spec)
    result = Launcher(plan, poll_s=0.5).run()
    assert result.ok
    _, runs = runs_of(plan, f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = cell_runs(runs)["kl-mc-s0"]  # one run across both attempts
    assert run.info.status == "FINISHED" and run.data.tags[M.TAG_ATTEMPT] == "2"
    assert run.data.tags[M.TAG_RAY_JOB_ID].endswith("-a2")


def test_a_cell_that_says_it_returned_frees_its_slot_at_once(tmp_path, ray_cluster):
    """The local backend's fork server tells the launcher when a cell returns: the launcher
    polls then, not at its next round. Three cells one at a time with a 60-s poll finish well
    within one poll (without the hint, each cell's end waits for a round: over 3 minutes)."""
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="hint",
        backend="probe_hint",
        probe_hint={"steps": 1, "marker_dir": str(tmp_path / "m")},
        grid={"divergences": ["tv", "kl", "chi2"], "estimators": ["mc"]},
    )
    plan = load_plan(spec)
    started = time.monotonic()
    result = Launcher(plan, poll_s=60.0, max_concurrent=1).run()
    took = time.monotonic() - started
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    assert took < 60.0, f"the launch waited for its polls: {took:.0f} s"


def test_a_resumed_attempt_starting_up_is_not_taken_for_a_stall(tmp_path, ray_cluster):
    """verl's case: the failed attempt logged raw step 2 but its train score only to step 1; the
    retry, while it starts up, mirrors step 2. That is not a step of its own: the attempt stays
    under first_step_timeout_s (30 s) and is not stopped by stall_timeout_s (3 s) before it
    trains (it once was: every relaunched verl attempt that took over a minute to start)."""
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="lag",
        backend="probe_reuse",
        probe_reuse={
            "steps": 4,
            "fail_times": 1,
            "mirror_lag": True,
            "startup_s": 9,
            "marker_dir": str(tmp_path / "m"),
        },
        grid={"divergences": ["kl"], "estimators": ["mc"]},
        retries={"max": 1, "backoff_s": 0.2, "stall_timeout_s": 3, "first_step_timeout_s": 30},
    )
    plan = load_plan(spec)
    result = Launcher(plan, poll_s=0.5, metrics_every_s=0.5).run()
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    _, runs = runs_of(plan, f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = cell_runs(runs)["kl-mc-s0"]
    assert run.info.status == "FINISHED" and run.data.tags[M.TAG_ATTEMPT] == "2"
    assert M.TAG_FAILURE not in run.data.tags or "stalled" not in run.data.tags[M.TAG_FAILURE]


def test_a_stalled_attempt_is_stopped_and_retried(tmp_path, ray_cluster):
    """An attempt that logs no new step for retries.stall_timeout_s is stopped, ends FAILED with
    the reason, and the retry finishes; the log names the stall."""

    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="stall",
        grid={"divergences": ["tv"], "estimators": ["mc"]},
        probe={"steps": 3, "marker_dir": str(tmp_path / "m"), "hang_times": 1},
        # 4 s between steps; a first step gets a loaded machine's Ray start-up (~1-10 s)
        retries={"max": 1, "backoff_s": 0.2, "stall_timeout_s": 4, "first_step_timeout_s": 60},
    )
    plan = load_plan(spec)
    events: list = []
    t0 = time.monotonic()
    result = Launcher(plan, poll_s=0.5, metrics_every_s=0.5, on_event=events.append).run()
    took = time.monotonic() - t0
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    assert took < 120  # not the probe's hour-long hang
    _, runs = runs_of(plan, f"sqlite:///{tmp_path}/mlflow.db")
    runs = sorted(cell_runs(runs)["tv-mc-s0"], key=lambda r: int(r.data.tags[M.TAG_ATTEMPT]))
    assert [r.info.status for r in runs] == ["FAILED", "FINISHED"]
    failure = runs[0].data.tags[M.TAG_FAILURE]
    assert "stalled: no new training step" in failure and "since step 1" in failure
    assert "probe hanging on purpose" in failure  # the log's tail comes with it
    kinds = [(e.kind, e.attempt) for e in events if e.cell == "tv-mc-s0"]
    assert ("stalled", 1) in kinds and ("retrying", 1) in kinds and ("finished", 2) in kinds
    assert kinds.index(("stalled", 1)) < kinds.index(("retrying", 1))
    (row,) = sweep_status(plan)
    assert row.state == "done" and row.last_failure.startswith("stalled: no new training step")


def test_stall_timeout_defaults_come_from_the_backend(tmp_path):
    from gppo.backends.base import get_backend
    from gppo.backends.local.settings import LocalSettings

    local = get_backend("local")
    s = LocalSettings()
    assert local.stall_timeout_s(s, first_step=True) >= 600 + 0.3 * s.warmstart_steps  # a build
    assert local.stall_timeout_s(s) == 600  # between steps: no build, whatever the cap
    plan = load_plan(write_spec(tmp_path, None, name="nostall"))
    assert Launcher(plan).stall_timeout_s(plan.cells[0]) == 0.0  # the probe backend: never
    spec = write_spec(tmp_path, None, name="stall", retries={"stall_timeout_s": 7})
    plan = load_plan(spec)
    assert Launcher(plan).stall_timeout_s(plan.cells[0]) == 7.0
