"""``gppo-sweep ui``: the URLs it prints (once the server answers), ``/`` sent to the sweep's
runs, and SIGTERM leaving nothing on the port; ``plan``'s environment column and the empty-spec
message."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from gppo import metrics as M
from gppo.cli import app
from gppo.grid import load_plan
from gppo.ports import free_port
from gppo.store.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, Tracking

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import sweep.probe_backend  # noqa: E402, F401
from sweep.conftest import env_without_ray, launcher_cmd  # noqa: E402

SPEC = """\
name: uitest
backend: probe
probe: {steps: 1}
grid: {divergences: [tv, kl], estimators: [mc]}
seeds: 1
tracking: {uri: "sqlite:///TMP/mlflow.db"}
"""


def write(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(text.replace("TMP", str(tmp_path)))
    return path


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one GET, redirects not followed; the connection closed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _descendant_cmdlines(pid: int) -> list[str]:
    import psutil

    out = []
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            out.append(" ".join(child.cmdline()))
    return out


@pytest.mark.slow
def test_ui_opens_on_the_sweeps_runs_and_sigterm_leaves_nothing(tmp_path):
    spec = write(tmp_path)
    plan = load_plan(spec)
    # the sweep's layout in a real store, as the launcher writes it (no jobs needed here)
    tracking = Tracking(plan.spec.tracking.uri)
    tracking.init_store()
    exp = tracking.experiment_id(plan.spec.experiment)
    parent = tracking.sweep_run(exp, plan.sweep_id)
    run_ids = [
        tracking.create_cell_run(exp, parent, plan.sweep_id, c, attempt=1, submission_id="s")
        for c in plan.cells
    ]
    client = tracking.client
    assert client.get_experiment(exp).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    assert [client.get_run(r).info.run_name for r in run_ids] == [c.id for c in plan.cells]

    port = free_port()
    proc = subprocess.Popen(
        [*launcher_cmd(), "ui", str(spec), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_without_ray(),
    )  # fmt: skip
    try:
        runs_line = proc.stdout.readline().strip()
        assert runs_line.startswith("sweep runs: http://127.0.0.1:"), runs_line
        runs = urlsplit(runs_line.removeprefix("sweep runs: "))
        # printed only once the server answers: the URL opens at once, no retry (the page a
        # browser gets for it: the fragment stays in the browser, the request is for its path)
        assert get(port, runs.path or "/")[0] == 200
        compare_line = proc.stdout.readline().strip()
        route, _, query = runs.fragment.partition("?")
        assert route == f"/experiments/{exp}/runs"
        q = parse_qs(query)
        assert q["workflowType"] == ["machine_learning"]  # model training, not the GenAI pages
        assert plan.sweep_id in q["searchFilter"][0] and M.ROLE_CELL in q["searchFilter"][0]
        assert q["orderByKey"] == [f"metrics.`{M.eval_domain_metric(8)}`"]
        compare = urlsplit(compare_line.removeprefix("compare cells: "))
        assert compare.fragment.startswith("/compare-runs?")
        cq = parse_qs(compare.fragment.partition("?")[2])
        assert sorted(json.loads(cq["runs"][0])) == sorted(run_ids)

        # a browser pointed at the server lands on the sweep's runs
        status, _, body = get(port, "/")
        assert status == 200
        home = "/?gppo-sweep" + "#" + runs.fragment
        assert (
            f'window.location.replace(h && h !== "#" && h !== "#/" ? "/?gppo-sweep" + h : "{home}")'
            in body.decode()
        )
        status, _, body = get(port, "/?gppo-sweep")  # MLflow's own page
        assert status == 200 and b"<html" in body.lower() and b"static-files" in body
        assert (tmp_path / "mlflow.db").exists()
        # MLflow's GenAI job runner is left off (7 huey processes a sweep's UI does not use)
        assert not [cmd for cmd in _descendant_cmdlines(proc.pid) if "huey" in cmd]
    finally:
        proc.send_signal(signal.SIGTERM)  # the ui process alone, as a user's kill would
        proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while port_in_use(port) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not port_in_use(port), "something still listens on the ui's port after SIGTERM"


def test_plan_shows_each_cells_environment(tmp_path):
    result = CliRunner().invoke(app, ["plan", str(write(tmp_path))], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("tv-mc-s0: "))
    assert f"MLFLOW_TRACKING_URI=sqlite:///{tmp_path}/mlflow.db" in line
    assert "MLFLOW_RUN_ID=<run id, at launch>" in line and "probe_job.py" in line
    rows = json.loads(CliRunner().invoke(app, ["plan", str(write(tmp_path)), "--json"]).stdout)
    assert rows[0]["env"]["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path}/mlflow.db"


def test_empty_spec_file_says_so(tmp_path):
    for text in ("", "\n\n", "# nothing yet\n"):
        path = tmp_path / "empty.yaml"
        path.write_text(text)
        result = CliRunner().invoke(app, ["plan", str(path)])
        assert result.exit_code == 2
        assert result.stderr.startswith(f"{path}: the file is empty")
        assert len(result.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "mlflow.db")
