"""``plan`` never needs the store (issue 57, item 12): a spec whose tracking server is not running
plans at once, its forecast from the pre-flight with one line saying why, exit 0 (it spent
4 min in MLflow's HTTP retries and ended with a traceback). ``status``'s forecast does the same;
a store that answers ``/health`` but not its reads is waited for a few seconds only."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gppo.backends.base import get_backend
from gppo.backends.checkresult import StepTiming
from gppo.cli import app
from gppo.grid import load_plan
from gppo.ports import free_port
from gppo.store import deadline
from gppo.store.deadline import read_within
from gppo.sweep.planning.forecast import PREFLIGHT, forecast, forecast_lines


def spec(tmp_path: Path, uri: str) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(
        "name: down\nbackend: local\nlocal: {domain: math, steps: 10}\n"
        f"grid: {{divergences: [tv], estimators: [mc, atomic]}}\nseeds: 1\n"
        f"tracking: {{uri: 'http://alice:S3cret@{uri}'}}\n"
    )
    return path


@pytest.fixture
def timed(monkeypatch):
    """The local backend's pre-flight without its subprocess: 10 s a run."""
    backend = type(get_backend("local"))
    monkeypatch.setattr(backend, "step_timing", lambda self, cell: StepTiming(5.0, 0.5, 10))


def test_plan_with_the_tracking_server_down(tmp_path, timed):
    path = spec(tmp_path, f"127.0.0.1:{free_port()}")  # nothing listens there
    start = time.monotonic()
    result = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "200"})
    took = time.monotonic() - start
    assert result.exit_code == 0, result.output
    assert took < 20, took
    out = result.stdout
    assert "tv-atomic-s0" in out and "job commands" in out  # the plan itself
    (line,) = [ln for ln in out.splitlines() if "does not answer" in ln]
    assert line.startswith("forecast: the store at http://") and "127.0.0.1:" in line
    assert line.endswith("forecast without it (from the pre-flight)")
    assert "S3cret" not in out and "Traceback" not in result.output
    assert "pre-flight: one training step here" in out  # the forecast is the pre-flight's


class Hanging(http.server.BaseHTTPRequestHandler):
    """A server whose /health answers and whose API calls do not (until ``release``)."""

    release = threading.Event()

    def do_GET(self):
        if self.path == "/health":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")
            return
        self.release.wait(30)
        self.send_response(503)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args):
        pass


def test_a_store_that_does_not_answer_its_reads_is_waited_for_briefly(tmp_path, timed, monkeypatch):
    monkeypatch.setattr(deadline, "STORE_WAIT_S", 1.0)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the abandoned read ends soon
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hanging)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        plan = load_plan(spec(tmp_path, f"127.0.0.1:{server.server_address[1]}"))
        start = time.monotonic()
        fc = forecast(plan)
        assert time.monotonic() - start < 10
        assert fc.note is not None and "did not answer within 1 s" in fc.note
        assert {s.kind for s in fc.sources} == {PREFLIGHT}
        assert forecast_lines(fc)[0] == f"forecast: {fc.note}"
    finally:
        Hanging.release.set()
        server.shutdown()
        server.server_close()


def test_read_within_says_why_in_one_line():
    assert read_within("sqlite:///nowhere.db", lambda: 3) == (3, None)  # not probed

    def fails():
        raise RuntimeError("no such table: runs\nmore")

    value, why = read_within("sqlite:///x.db", fails)
    assert value is None and why == (
        "the store at sqlite:///x.db could not be read (RuntimeError: no such table: runs)"
    )
    value, why = read_within("sqlite:///x.db", lambda: time.sleep(2), seconds=0.1)
    assert value is None and why == "the store at sqlite:///x.db did not answer within 0.1 s"
