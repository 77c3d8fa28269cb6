"""A sweep launched with command-line overrides (issue 61), as a user runs it: `status`, `logs`
and `report` given the same overrides find it; the parent run and the report page record them."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from typer.testing import CliRunner

from gppo import metrics as M
from gppo.cli import app

from .conftest import env_without_ray, launcher_cmd, write_spec

OVERRIDES = [
    "tracking.experiment=ov-exp",
    "grid.divergences=[tv]",
    "grid.estimators=[mc,atomic]",
    "probe.steps=1",
]


@pytest.mark.slow
def test_launch_with_overrides_then_status_logs_report(tmp_path, ray_cluster):
    spec = write_spec(tmp_path, ray_cluster.address)
    launch = subprocess.run(
        [*launcher_cmd(), "launch", str(spec), *OVERRIDES], capture_output=True, text=True,
        env={**env_without_ray(), "COLUMNS": "200"}, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert launch.returncode == 0, launch.stdout[-3000:] + launch.stderr[-3000:]
    assert f"gppo-sweep ui {spec} {shlex.join(OVERRIDES)}" in launch.stdout

    result = CliRunner().invoke(app, ["status", str(spec), *OVERRIDES, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["cell"]: r["state"] for r in rows} == {"tv-mc-s0": "done", "tv-atomic-s0": "done"}
    result = CliRunner().invoke(app, ["status", str(spec), "--json"])  # the file's own sweep
    assert {r["state"] for r in json.loads(result.stdout)} == {"pending"}

    result = CliRunner().invoke(app, ["logs", str(spec), "tv-atomic-s0", *OVERRIDES])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()

    out = tmp_path / "report"
    cmd = ["report", str(spec), *OVERRIDES, "-o", str(out), "-f", "html", "--no-figures"]
    result = CliRunner().invoke(app, cmd)
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text()
    assert "spec overrides" in page and "probe.steps=1" in page

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("ov-exp").experiment_id
    (parent,) = [
        r for r in client.search_runs([exp]) if r.data.tags.get(M.TAG_ROLE) == M.ROLE_SWEEP
    ]
    assert parent.data.tags[M.TAG_SPEC_OVERRIDES] == shlex.join(OVERRIDES)
