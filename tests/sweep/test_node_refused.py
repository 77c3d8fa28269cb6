"""A cell whose node the tracking server refuses (HTTP 401/403: no account there, or no
permission on the sweep's experiment) fails at once, not retried: a retry would be refused the
same way. The launch says the one line, and ``status`` says what to grant to whom (issue 46)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gppo.cli import app
from gppo.grid import load_plan
from gppo.sweep.launch import Launcher

from .conftest import write_spec

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("code", [403, 401])
def test_a_refused_node_fails_its_cell_at_once_and_status_says_what_to_grant(
    tmp_path, ray_cluster, code
):
    spec = write_spec(
        tmp_path, ray_cluster.address, name=f"refused{code}",
        grid={"divergences": ["tv", "kl"], "estimators": ["mc"]},
        overrides={"kl-mc": {"probe": {"node_refused": code, "node_user": "bob"}}},
        retries={"max": 2, "backoff_s": 0.2},
    )  # fmt: skip
    plan = load_plan(spec)
    events = []
    result = Launcher(plan, poll_s=0.5, on_event=events.append).run()
    assert {k: c.state for k, c in result.cells.items()} == {
        "tv-mc-s0": "done",
        "kl-mc-s0": "failed",
    }
    refused = result.cells["kl-mc-s0"]
    assert refused.attempt == 1 and refused.tries == 1  # no retry burnt
    assert not [e for e in events if e.kind == "retrying"]
    (failed,) = [e for e in events if e.kind == "failed"]
    assert (
        "cannot log to MLflow from this node" in failed.text() and f"HTTP {code}" in failed.text()
    )
    status = CliRunner().invoke(app, ["status", str(spec)], env={"COLUMNS": "1000"})
    assert status.exit_code == 0, status.output[-2000:]
    (fix,) = [ln for ln in status.output.splitlines() if ln.startswith("to fix: ")]
    if code == 403:
        assert f"grant user 'bob' EDIT on experiment {plan.spec.experiment!r}" in fix
    else:
        assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in fix
    rows = json.loads(CliRunner().invoke(app, ["status", str(spec), "--json"]).stdout)
    (row,) = [r for r in rows if r["cell"] == "kl-mc-s0"]
    assert row["attempt"] == 1 and row["fix"] == fix.removeprefix("to fix: ")
