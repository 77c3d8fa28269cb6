"""A tracking server that goes away mid-sweep, on the real engines: an ``mlflow server`` (SQLite
backend) the test stops and starts again on the same port, a real local Ray head, probe cells
that log into their runs through the server while it is down.

1. Down for 60 s, then back: the launcher says so (one line each way), holds its submissions and
   run endings meanwhile, the cells ride it out with MLflow's own retries, and every cell
   finishes exactly once with no run left RUNNING.
2. Down past ``tracking.unreachable_timeout_s``: the launcher stops with one line and a non-zero
   exit, leaving the jobs running; once the server is back a relaunch settles them, and no cell
   runs twice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import cell_runs
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.errors import TrackingUnreachable
from gppo.grid.load import load_plan
from gppo.ports import free_port
from gppo.store.health import tracking_unreachable
from gppo.sweep.launch import Launcher
from gppo.sweep.monitor.mlflow_ui import JOB_EXECUTION

from .conftest import write_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class Server:
    """``mlflow server`` on a fixed port and SQLite store, that can be stopped and restarted."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self, timeout: float = 120.0) -> None:
        mlflow = str(Path(sys.executable).with_name("mlflow"))
        cmd = [
            mlflow, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{self.root}/server.db",
            "--default-artifact-root", str(self.root / "artifacts"),
        ]  # fmt: skip
        env = {**os.environ, JOB_EXECUTION: "false"}  # MLflow's GenAI job runner: not used
        with open(self.root / "server.log", "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )
        deadline = time.monotonic() + timeout
        while tracking_unreachable(self.uri) is not None:
            assert time.monotonic() < deadline, (self.root / "server.log").read_text()[-2000:]
            time.sleep(0.3)
        self.started_at = time.time()  # answering since (within the 0.3 s above)

    def stop(self) -> None:
        if self.proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
                break
        self.proc = None


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path)
    srv.start()
    yield srv
    srv.stop()


def _spec(tmp_path: Path, address: str, uri: str, name: str, **tracking) -> Path:
    """A sweep of its own ``name`` per test: the two tests run side by side on the two workers,
    and a launcher ends what is left of an attempt on this machine by its job's id (the sweep's
    name and spec hash, the tracking URI not in it): with one name for both, the second test's
    relaunch SIGTERMed the first test's cells mid-outage."""
    return write_spec(
        tmp_path,
        address,
        name=name,
        grid={"divergences": ["tv", "kl", "hellinger"], "estimators": ["mc"]},
        probe={"steps": 8, "sleep_s": 3.0, "marker_dir": str(tmp_path / "m")},
        tracking={"uri": uri, **tracking},
        retries={"max": 1, "backoff_s": 0.2, "stall_timeout_s": 0},
    )


def _outage_after_first_start(
    tmp_path: Path, server: Server, down_s: float, glob: str = "*.times"
) -> threading.Thread:
    """Stop the server once a cell process has started (its marker file under ``m/``, ``glob``);
    start it again ``down_s`` later."""

    def run() -> None:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "m").glob(glob)) and time.monotonic() < deadline:
            time.sleep(0.2)
        server.stop()
        time.sleep(down_s)
        server.start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _attempts(tmp_path: Path) -> dict[str, int]:
    return {
        p.name.removesuffix(".attempts"): len(p.read_text().splitlines())
        for p in (tmp_path / "m").glob("*.attempts")
    }


def test_a_tracking_server_away_for_60_s_loses_nothing(tmp_path, ray_cluster, server):
    """Over 120 s (about 3 min): the outage itself lasts 60 s, past MLflow's own first retries,
    which is what the launcher must ride out; then the cells finish."""
    plan = load_plan(_spec(tmp_path, ray_cluster.address, server.uri, "outage-60s"))
    events: list = []
    outage = _outage_after_first_start(tmp_path, server, down_s=60)
    result = Launcher(plan, poll_s=0.5, metrics_every_s=1.0, on_event=events.append).run()
    outage.join(timeout=200)
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    down = [e for e in events if e.kind == "outage"]
    back = [e for e in events if e.kind == "recovered"]
    assert [e.service for e in down] == ["tracking"] and down[0].where == server.uri, events
    assert [e.service for e in back] == ["tracking"] and back[0].took_s >= 60, events
    assert "does not answer" in down[0].text() and "answers again after" in back[0].text()
    # the recovery is seen within a few seconds of the server answering again
    assert back[0].at - server.started_at < 5, (back[0].at, server.started_at)
    assert _attempts(tmp_path) == {"tv-mc-s0": 1, "kl-mc-s0": 1, "hellinger-mc-s0": 1}  # once each
    runs = cell_runs(server.uri).values()
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3
    client = MlflowClient(server.uri)
    for run in runs:  # every step the cells logged while the server was away is there
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, M.TRAIN_SCORE))
        assert steps == list(range(1, 9)), (run.data.tags[M.TAG_CELL_ID], steps)


def test_a_tracking_server_away_too_long_stops_the_launcher_and_a_relaunch_settles(
    tmp_path, ray_cluster, server
):
    spec = _spec(tmp_path, ray_cluster.address, server.uri, "outage-long", unreachable_timeout_s=8)
    plan = load_plan(spec)
    outage = _outage_after_first_start(tmp_path, server, down_s=20)
    t0 = time.monotonic()
    with pytest.raises(TrackingUnreachable) as err:
        Launcher(plan, poll_s=0.5, metrics_every_s=1.0).run()
    assert time.monotonic() - t0 < 60
    line = str(err.value)
    assert "\n" not in line and "tracking.unreachable_timeout_s = 8" in line, line
    assert server.uri in line and "launch again once it answers" in line, line
    outage.join(timeout=200)  # the server is back
    result = Launcher(load_plan(spec), poll_s=0.5, metrics_every_s=1.0).run()
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    assert _attempts(tmp_path) == {"tv-mc-s0": 1, "kl-mc-s0": 1, "hellinger-mc-s0": 1}  # once each
    runs = cell_runs(server.uri).values()
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3  # nothing left RUNNING
