"""The quick start's own path: ``gppo-sweep launch`` of a ``backend: local`` spec, with no address
(so the launcher starts and stops its own local Ray head), real testbed cells trained from the
shipped base, avg@8 in every cell's MLflow run, and Table 1 printed at the end."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import yaml
from helpers import LAUNCH_TAG, fork_servers
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.testbed.shipped import shipped_record

#: the quick start's spec at a tiny budget (the shipped base's settings are untouched)
SPEC = {
    "name": "qs-path",
    "backend": "local",
    "local": {"domain": "math", "steps": 2, "prompts_per_step": 8, "eval_prompts": 8},
    "grid": {"divergences": ["tv"], "estimators": ["mc", "atomic"]},
    "baselines": ["gspo"],
    "seeds": 1,
    "eval": {"k": 8},
    "ray": {"max_concurrent": 2, "resources": {"num_cpus": 1, "num_gpus": 0}},
    "retries": {"max": 1, "backoff_s": 0.5},
}


@pytest.mark.slow
def test_quickstart_launch_trains_local_cells_under_its_own_ray_head(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = tmp_path / "grid.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "tracking": {"uri": uri}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    env["GPPO_CACHE_DIR"] = str(tmp_path / "empty-cache")
    env["COLUMNS"] = "200"
    env[LAUNCH_TAG] = tag = uuid.uuid4().hex  # what marks this launch's fork server
    proc = subprocess.run(
        [sys.executable, "-m", "gppo.cli", "launch", str(spec)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # Table 1: one row per cell and the base model's, with the per-benchmark columns
    table = out[out.index("Divergence") :]
    for label in ("MC (GRPO)", "Atomic", "GSPO", "Base model", "add-small", "add3", "Avg."):
        assert label in table, out[-4000:]
    # the launch's report draws the figures (analysis.figures, on by default)
    assert "report (tables and figures)" in out, out[-2000:]
    (report,) = tmp_path.glob("reports/*/")
    assert {"figure1_regions.png", "aggregate_intervals.png"} <= {p.name for p in report.iterdir()}

    client = MlflowClient(uri)
    (exp,) = [e for e in client.search_experiments() if e.name != "Default"]
    runs = client.search_runs([exp.experiment_id], max_results=100)
    cells = {
        r.data.tags[M.TAG_CELL_ID]: r for r in runs if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL
    }
    assert sorted(cells) == ["gspo-s0", "tv-atomic-s0", "tv-mc-s0"]
    base_mean = shipped_record("math")["avg_at_8_mean"]
    for run in cells.values():
        assert run.info.status == "FINISHED" and run.data.tags[M.TAG_FINISHED] == "true"
        assert M.TAG_PROCESSES not in run.data.tags  # a healthy cell leaves no process behind
        steps = sorted(
            m.step for m in client.get_metric_history(run.info.run_id, M.eval_domain_metric(8))
        )
        assert steps == [0, 2]
        for b in ("add-small", "add", "sub", "add3"):
            assert 0.0 <= run.data.metrics[M.eval_metric(b, 8)] <= 1.0
        # trained from the shipped base (8 prompts per benchmark: within sampling noise of it)
        base = client.get_metric_history(run.info.run_id, M.eval_domain_metric(8))
        assert abs(min(base, key=lambda m: m.step).value - base_mean) < 0.15
        step0 = [m.value for m in base if m.step == 0]
        assert len(step0) == 1
        # each cell's Ray job handed it to the launch's fork server (imports done once)
        assert run.data.metrics[M.PERF_FORKED] == 1.0
    # nothing warm-started (the shipped base); the base's step-0 evaluation is computed by the
    # first cell(s) and read by the later ones, with the same numbers
    assert list((tmp_path / "empty-cache").glob("base-*.pt")) == []
    reused = [run.data.metrics[M.PERF_BASE_EVAL_REUSED] for run in cells.values()]
    assert 1.0 in reused and 0.0 in reused, reused
    step0_means = {
        min(
            client.get_metric_history(r.info.run_id, M.eval_domain_metric(8)), key=lambda m: m.step
        ).value
        for r in cells.values()
    }
    assert len(step0_means) == 1, step0_means
    # the fork server went with the launch that started it (one of another sweep already on this
    # machine is none of this test's)
    assert not fork_servers(tag)
