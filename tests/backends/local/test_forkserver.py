"""The testbed's fork server (gppo.backends.local.forkserver) with its job-side client, real
processes throughout: a forked cell gives the same numbers as a fresh process, its exit code and
errors reach the job, signals reach the cell, a killed job takes its cell with it, and without a
server the client runs the cell itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gppo import metrics as M
from gppo.backends.local import forkserver, forkserver_manager

pytestmark = pytest.mark.slow

TINY = ["--method", "grpo", "--set", "steps=2", "--set", "eval_prompts=4", "--no-mlflow"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def server():
    with forkserver_manager.running({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}) as started:
        path = started.path()
        assert path is not None
        yield path


def _client(args: list[str], socket_path: str | None, **kw) -> subprocess.Popen:
    env = {k: v for k, v in ENV.items() if k != forkserver.ENV_SOCKET}
    if socket_path:
        env[forkserver.ENV_SOCKET] = socket_path
    return subprocess.Popen(
        [sys.executable, forkserver.CLIENT_SCRIPT, *args], env=env, text=True, **kw
    )


def _summary(tmp_path: Path, name: str, argv: list[str], socket_path: str | None) -> dict:
    out = tmp_path / f"{name}.json"
    proc = _client([*argv, "--summary-json", str(out)], socket_path, stdout=subprocess.PIPE)
    stdout, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout
    summary = json.loads(out.read_text())
    summary["stdout"] = stdout
    return summary


def _forked_cells(server_path: str) -> list[psutil.Process]:
    """Cell processes the server forked: its command line, but neither the server (this
    process started it) nor a child of it (the middle process of the double fork)."""
    procs = [
        p
        for p in psutil.process_iter(["cmdline", "ppid"])
        if server_path in (p.info["cmdline"] or [])
    ]
    servers = {p.pid for p in procs if p.info["ppid"] == os.getpid()}
    return [p for p in procs if p.pid not in servers and p.info["ppid"] not in servers]


def test_a_forked_cell_gives_the_numbers_of_a_fresh_process(tmp_path, server):
    forked = _summary(tmp_path, "forked", TINY, server)
    fresh = subprocess.run(
        [sys.executable, "-m", "gppo.backends.local", *TINY, "--summary-json", str(tmp_path / "b")],
        env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    fresh_summary = json.loads((tmp_path / "b").read_text())
    assert forked["evals"] == fresh_summary["evals"]  # avg@k of the base and the trained policy
    assert forked["history"] == fresh_summary["history"]  # every step's metrics, to the last bit
    assert forked["perf"][M.PERF_FORKED] == 1.0 and fresh_summary["perf"][M.PERF_FORKED] == 0.0
    assert "[grpo-s0] eval step 2" in forked["stdout"]  # the cell wrote into the job's stdout


def test_the_cells_exit_code_and_error_reach_the_job(server):
    proc = _client([*TINY, "--set", "no_such_setting=1"], server, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "no_such_setting" in err  # the cell's own traceback, in the job's stderr


def test_without_a_server_the_client_runs_the_cell_itself(tmp_path):
    alone = _summary(tmp_path, "alone", TINY, None)
    assert alone["perf"][M.PERF_FORKED] == 0.0 and alone["evals"]
    dead = _summary(tmp_path, "dead", TINY, str(tmp_path / "no-server.sock"))
    assert dead["perf"][M.PERF_FORKED] == 0.0 and dead["evals"] == alone["evals"]


def _wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 120) -> str:
    """Read the process's stdout until a line containing ``text`` (fails after ``timeout`` s)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sel.select(timeout=max(0.0, deadline - time.monotonic())):
            line = proc.stdout.readline()
            line = line.decode() if isinstance(line, bytes) else line
            if text in line:
                return line
            if not line:
                break
    raise AssertionError(f"no line with {text!r} from the cell")


def _running_cell(server: str) -> tuple[subprocess.Popen, psutil.Process]:
    """A client whose cell runs long enough to be signalled, and the cell's process."""
    long = ["--method", "grpo", "--set", "steps=100000", "--set", "eval_prompts=4", "--no-mlflow"]
    proc = _client(long, server, stdout=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        cells = _forked_cells(server)
        if cells:
            return proc, cells[0]
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("no forked cell process appeared")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_job_reaches_its_cell(server, sig):
    """What `ray job stop` and the launcher's stall detection send: the cell dies, and the job
    exits as a process killed by that signal would (128 + its number)."""
    proc, cell = _running_cell(server)
    _wait_for_line(proc, "base model")  # the cell is in its own code, past start-up
    proc.send_signal(sig)
    expected = {signal.SIGTERM: {143}, signal.SIGINT: {1, 130}}[sig]  # SIGINT: the cell's
    assert proc.wait(timeout=30) in expected  # KeyboardInterrupt, its traceback, exit 1
    _wait_gone(cell)  # the job exits on the cell's exit line; the cell exits just after it


def _wait_gone(cell: psutil.Process, timeout: float = 30) -> None:
    """Wait until ``cell`` has exited (a zombie counts: its parent, init, reaps it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not cell.is_running() or cell.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"the cell (pid {cell.pid}) outlived its job by {timeout} s")


def test_a_killed_job_takes_its_cell_with_it(server):
    """SIGKILL (a dead Ray head, `ray job stop` after its grace period): the client cannot
    forward anything; the cell sees its socket close and kills itself."""
    proc, cell = _running_cell(server)
    proc.kill()
    proc.wait(timeout=10)
    cell.wait(timeout=30)  # raises psutil.TimeoutExpired if it lived on
    assert not cell.is_running()


def test_the_server_exits_with_the_launcher_that_started_it(tmp_path):
    code = (
        "import sys, time\n"
        "from gppo.backends.local import forkserver_manager\n"
        "with forkserver_manager.running({}) as server:\n"
        "    print(server.path(), flush=True)\n"
        "    time.sleep(600)\n"
    )
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    path = launcher.stdout.readline().strip()
    assert path.endswith("cells.sock") and os.path.exists(path)
    (srv,) = [p for p in psutil.process_iter(["cmdline"]) if path in (p.info["cmdline"] or [])]
    launcher.kill()  # SIGKILL: no context manager gets to stop the server
    launcher.wait()
    srv.wait(timeout=10)
    assert not os.path.exists(path)  # it removed its socket on the way out


def test_the_launcher_hears_of_each_cell_that_returns(tmp_path):
    """``running(on_cell_end=)``: called once per returned cell, a failing one included, so the
    launcher polls its job at once; the cell's job still ends as before."""
    import threading

    heard = threading.Semaphore(0)
    with forkserver_manager.running(
        {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, on_cell_end=heard.release
    ) as started:
        path = started.path()
        assert path is not None
        _summary(tmp_path, "heard", TINY, path)
        assert heard.acquire(timeout=30)
        bad = _client(["--method", "no-such-method", "--no-mlflow"], path)
        assert bad.wait(timeout=120) != 0
        assert heard.acquire(timeout=30)
        assert not heard.acquire(timeout=0.5)  # once per cell


def _stopped(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until it is stopped (what a hung server looks like)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_stopped_server_is_ended_and_replaced(tmp_path):
    """A server frozen by SIGSTOP is not handed the next job: it is SIGKILLed at once (a stopped
    process acts on nothing else), a replacement imports meanwhile (the jobs run without one
    until it is ready) and serves the jobs after; the replacement, too, is gone at the end."""
    with forkserver_manager.running({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}) as started:
        first = started.path()
        assert first is not None
        frozen = started.proc.pid
        _stopped(frozen)
        assert started.path() is None  # this job imports its own modules
        assert not psutil.pid_exists(frozen) or psutil.Process(frozen).status() == "zombie"
        deadline = time.monotonic() + 120
        while (again := started.path()) is None:
            assert time.monotonic() < deadline, "no replacement became ready"
            time.sleep(0.2)
        assert again != first and forkserver_manager.ping(again, 5.0)
        forked = _summary(tmp_path, "replaced", TINY, again)
        assert forked["perf"][M.PERF_FORKED] == 1.0 and forked["evals"]
        replacement = started.proc
    assert replacement.poll() is not None  # ended with the launch


def test_a_job_stopped_while_the_server_is_frozen_runs_no_cell(tmp_path):
    """The client waits for a frozen server's answer; a stop (SIGTERM: stall detection, `ray
    job stop`) then ends the job at once, as a killed process (143), and no cell runs: not
    forked, not run by the client itself."""
    with forkserver_manager.running({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}) as started:
        path = started.path()
        assert path is not None
        _stopped(started.proc.pid)
        out = tmp_path / "never.json"
        proc = _client([*TINY, "--summary-json", str(out)], path, stdout=subprocess.PIPE)
        time.sleep(1.0)  # connected, waiting for the cell's pid
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
        assert not out.exists()
