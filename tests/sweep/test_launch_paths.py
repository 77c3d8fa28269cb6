"""Launcher paths no other test reaches, each on a real local Ray head and a SQLite store: a job
that exits 0 without the finished tag, an after-sweep hook that raises, and a submission id the
cluster already has."""

from __future__ import annotations

import logging

import pytest
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.sweep.launch import Launcher
from gppo.sweep.running.dispatcher import submission_id

from .conftest import write_spec

pytestmark = pytest.mark.slow  # Ray jobs

ONE_CELL = {"divergences": ["tv"], "estimators": ["mc"]}


def _cell_runs(plan, uri: str) -> list:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(plan.spec.experiment)
    runs = client.search_runs([exp.experiment_id], max_results=100)
    return [r for r in runs if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL]


def test_a_job_that_exits_0_without_the_finished_tag_is_a_failure(tmp_path, ray_cluster):
    spec = write_spec(
        tmp_path, ray_cluster.address, name="nofinish", grid=ONE_CELL,
        probe={"steps": 1, "marker_dir": str(tmp_path / "m"), "no_finish": True},
        retries={"max": 1, "backoff_s": 0.2},
    )  # fmt: skip
    plan = load_plan(spec)
    result = Launcher(plan, poll_s=0.3).run()
    assert not result.ok and result.cells["tv-mc-s0"].state == "failed"
    runs = _cell_runs(plan, f"sqlite:///{tmp_path}/mlflow.db")
    assert sorted(r.info.status for r in runs) == ["FAILED", "FAILED"]  # tried, retried, failed
    for run in runs:
        assert (
            "without logging its final evaluation (gppo.finished)" in run.data.tags[M.TAG_FAILURE]
        )


def test_an_after_sweep_hook_that_raises_does_not_fail_the_sweep(tmp_path, ray_cluster, caplog):
    spec = write_spec(tmp_path, ray_cluster.address, name="hook", grid=ONE_CELL)
    plan = load_plan(spec)

    def hook(*_args, **_kwargs):
        raise RuntimeError("report exploded")

    with caplog.at_level(logging.WARNING, logger="gppo.sweep.launch"):
        result = Launcher(plan, poll_s=0.3, after_sweep=hook).run()
    assert result.ok and result.report is None
    assert "after-sweep hook failed: report exploded" in caplog.text
    (run,) = _cell_runs(plan, f"sqlite:///{tmp_path}/mlflow.db")
    assert run.info.status == "FINISHED"


def test_a_submission_id_the_cluster_already_has_is_skipped_not_reused(tmp_path, ray_cluster):
    from gppo.sweep.cluster.ray_http import job_client

    spec = write_spec(tmp_path, ray_cluster.address, name="taken", grid=ONE_CELL)
    plan = load_plan(spec)
    taken = submission_id(plan.sweep_id, "tv-mc-s0", 1)
    client = job_client(ray_cluster.address)
    client.submit_job(entrypoint="true", submission_id=taken)
    result = Launcher(plan, poll_s=0.3).run()
    assert result.ok
    (run,) = _cell_runs(plan, f"sqlite:///{tmp_path}/mlflow.db")
    assert run.data.tags[M.TAG_ATTEMPT] == "2"  # attempt 1's id belonged to someone else
    assert run.data.tags[M.TAG_RAY_JOB_ID] == submission_id(plan.sweep_id, "tv-mc-s0", 2)
    assert client.get_job_info(taken).entrypoint == "true"  # the other job was left alone


def test_a_submission_ray_refuses_fails_that_cell_not_the_launch(tmp_path, ray_cluster, caplog):
    """Ray refuses kl-mc's job (a runtime env it rejects): that attempt's run ends FAILED with
    Ray's reason, is retried like any failure, and the rest of the sweep finishes."""
    spec = write_spec(
        tmp_path, ray_cluster.address, name="refused",
        grid={"divergences": ["tv", "kl"], "estimators": ["mc"]},
        overrides={"kl-mc": {"probe": {"refused": True}}},
        retries={"max": 1, "backoff_s": 0.2},
    )  # fmt: skip
    plan = load_plan(spec)
    with caplog.at_level(logging.WARNING, logger="gppo.sweep.launch"):
        result = Launcher(plan, poll_s=0.3).run()
    assert result.cells["tv-mc-s0"].state == "done"
    refused = result.cells["kl-mc-s0"]
    assert refused.state == "failed" and refused.note == "failed after 2 attempt(s)"
    assert caplog.text.count("Ray refused the submission") == 2
    runs = [r for r in _cell_runs(plan, f"sqlite:///{tmp_path}/mlflow.db")]
    mine = sorted(
        (r for r in runs if r.data.tags[M.TAG_CELL_ID] == "kl-mc-s0"),
        key=lambda r: int(r.data.tags[M.TAG_ATTEMPT]),
    )
    assert [r.info.status for r in mine] == ["FAILED", "FAILED"]
    assert [r.data.tags[M.TAG_ATTEMPT] for r in mine] == ["1", "2"]  # a new attempt each time
    for run in mine:
        failure = run.data.tags[M.TAG_FAILURE]
        assert failure.startswith("submission failed: ") and "env_vars" in failure, failure
