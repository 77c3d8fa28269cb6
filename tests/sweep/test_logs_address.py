"""``gppo-sweep logs SPEC CELL`` without --address, for a sweep launched with --address and no
ray.address in its spec (issue 46): it finds the job on the cluster the attempt was submitted to
(recorded in the attempt's run), as ``status`` finds the sweep; a running job on a cluster it
cannot find is one line and a non-zero exit, never "(no logs ...)" with exit 0."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from gppo import metrics as M
from gppo.cli import app
from gppo.grid import load_plan
from gppo.sweep.launch import Launcher

from .conftest import write_spec

pytestmark = pytest.mark.slow


def test_logs_finds_the_cluster_the_launch_used(tmp_path, ray_cluster, monkeypatch):
    spec = write_spec(
        tmp_path, None, name="logsaddr", grid={"divergences": ["tv"], "estimators": ["mc"]},
        probe={"steps": 2, "note": "hello-from-the-job"},
    )  # fmt: skip
    result = Launcher(load_plan(spec), address=ray_cluster.address, poll_s=0.5).run()
    assert result.ok, {k: (c.state, c.note, c.why) for k, c in result.cells.items()}
    got = CliRunner().invoke(app, ["logs", str(spec), "tv-mc-s0"])
    assert got.exit_code == 0, got.output[-2000:]
    assert "note=hello-from-the-job" in got.output and "probe done" in got.output
    # the run running, its cluster unknown (no address recorded): one line, non-zero
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id])
        if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL
    ]
    client.delete_tag(run.info.run_id, M.TAG_RAY_ADDRESS)
    client.update_run(run.info.run_id, status="RUNNING")
    got = CliRunner().invoke(app, ["logs", str(spec), "tv-mc-s0"])
    assert got.exit_code != 0 and "pass --address" in got.output, got.output[-2000:]
    assert "(no logs" not in got.output
