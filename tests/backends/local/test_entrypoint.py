"""A tiny-budget cell end to end through the real entry point into a real SQLite MLflow store."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import make_cell
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.cell import Cell

TINY = {
    "d_model": 32,
    "n_layers": 1,
    "n_heads": 2,
    "warmstart_steps": 100,
    "warmstart_batch": 32,
    "steps": 2,
    "prompts_per_step": 4,
    "minibatches": 2,
    "eval_prompts": 4,
}
BENCH = ("dsl-map", "dsl-list", "dsl-pair", "dsl-triple")


def _cell(tmp_path, **extra) -> Cell:
    return make_cell(
        "kl",
        "atomic",
        loss_params={"loss_agg_mode": "token-mean"},
        settings={**TINY, "cache_dir": str(tmp_path / "cache"), **extra},
    )


def _run(args: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-m", "gppo.backends.local", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.slow
def test_cell_logs_into_the_dispatchers_run(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("t")
    # code: even a 100-step warm start gets some one-op programs right, so advantages are non-zero
    cell = _cell(tmp_path, domain="code", prompts_per_step=16)
    # as the dispatcher does: the run exists, with tags and (some) params, before the job starts
    run_id = client.create_run(
        exp, tags={M.TAG_CELL_ID: cell.id, M.TAG_ROLE: M.ROLE_CELL}
    ).info.run_id
    client.log_param(run_id, "method", "gppo")
    proc = _run(["--cell", cell.to_json()], {M.ENV_TRACKING_URI: uri, M.ENV_RUN_ID: run_id})
    assert proc.returncode == 0, proc.stderr[-3000:]

    run = client.get_run(run_id)
    assert run.info.status == "RUNNING"  # the dispatcher terminates it, not the job
    assert run.data.tags[M.TAG_FINISHED] == "true"
    params = run.data.params
    assert params["method"] == "gppo" and params["divergence"] == "kl"
    assert params["local.steps"] == "2" and "local.warmstart_hash" in params

    def steps(key: str) -> list[int]:
        return sorted(m.step for m in client.get_metric_history(run_id, key))

    assert steps(M.TRAIN_SCORE) == [1, 2]
    for key in (M.ENTROPY, M.WALL_TIME, M.APPROX_KL, M.CLIP_FRAC_LOW, M.CLIP_FRAC_HIGH):
        assert steps(key) == [1, 2], key
    assert steps(M.clip_frac_bucket("mu_lt_0.01")) == [1, 2]
    assert steps(M.eval_domain_metric(8)) == [0, 2]
    for b in BENCH:
        hist = client.get_metric_history(run_id, M.eval_metric(b, 8))
        assert sorted(m.step for m in hist) == [0, 2]
        assert all(0.0 <= m.value <= 1.0 for m in hist)
    # some rewards were non-zero, so training changed the policy's parameters
    assert max(m.value for m in client.get_metric_history(run_id, M.TRAIN_SCORE)) > 0
    assert run.data.metrics[M.PERF_PARAM_DELTA_L2] > 0

    # standalone: no MLFLOW_RUN_ID -> the entry point makes its own run and ends it
    proc = _run(
        [
            "--method",
            "grpo",
            "--domain",
            "code",
            "--tracking-uri",
            uri,
            "--experiment",
            "by-hand",
            "--quiet",
            "--set",
            f"cache_dir={tmp_path / 'cache'}",
        ]
        + [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")],
        {},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp2 = client.get_experiment_by_name("by-hand")
    (run2,) = client.search_runs([exp2.experiment_id])
    assert run2.info.status == "FINISHED"
    assert run2.data.tags[M.TAG_FINISHED] == "true" and run2.data.tags[M.TAG_CELL_ID] == "grpo-s0"
    # the same tiny code base as the first run: reused from the cache, not built again (a build
    # is announced even with --quiet)
    assert "building a base model" not in proc.stdout, proc.stdout
