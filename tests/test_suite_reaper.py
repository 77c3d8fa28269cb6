"""The suite ends what a test leaves behind (tests/conftest.py with tests/suite_processes.py): a process
a test started whose parent is gone, such as the dashboard agent of a Ray head the test SIGKILLed,
would otherwise run on and take CPU from every later test."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest
from suite_processes import DAEMON_ENV, reap_orphans, started_here

ORPHAN = (
    "import subprocess, sys; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
    "start_new_session=True)"
)


@pytest.mark.slow
def test_an_orphan_the_test_left_is_ended_and_named():
    before = set(started_here())
    subprocess.run([sys.executable, "-c", ORPHAN], check=True, timeout=60)  # exits at once
    (orphan,) = [p for key, p in started_here().items() if key not in before]
    assert orphan.ppid() == 1  # its parent is gone: reparented to init
    reaped = reap_orphans(before)
    assert reaped == [f"{orphan.name()} ({orphan.pid})"]
    with pytest.raises(psutil.NoSuchProcess):
        orphan.wait(timeout=10)
        orphan.status()  # gone (init reaps it)


@pytest.mark.slow
def test_a_process_whose_parent_lives_is_left_alone():
    before = set(started_here())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert reap_orphans(before) == []
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_a_fixtures_daemon_outlives_each_test_and_ends_with_the_session():
    """PostgreSQL's postmaster (pg_ctl daemonizes it) is an orphan while its session fixture
    lives: reaped after a test, it took the team's MLflow store and two sweep tests with it."""
    before = set(started_here())
    env = {**os.environ, DAEMON_ENV: "1"}
    subprocess.run([sys.executable, "-c", ORPHAN], check=True, timeout=60, env=env)
    (daemon,) = [p for key, p in started_here().items() if key not in before]
    assert daemon.ppid() == 1
    assert reap_orphans(before) == []
    assert daemon.is_running()
    assert reap_orphans(before, daemons=True) == [f"{daemon.name()} ({daemon.pid})"]
    with pytest.raises(psutil.NoSuchProcess):
        daemon.wait(timeout=10)
        daemon.status()


def test_the_team_stops_after_the_last_test_that_needs_it_and_not_within_a_module():
    """tests/sweep/servers.py's SharedTeam: its services (a Ray cluster, an MLflow server,
    PostgreSQL) are stopped once the next test neither needs them nor shares the module whose
    module-scoped fixtures hold them."""
    import contextlib
    from types import SimpleNamespace

    from sweep.servers import SharedTeam

    stops: list[str] = []
    shared = SharedTeam()

    def started() -> None:
        stack = contextlib.ExitStack()
        stack.callback(stops.append, "stopped")
        shared._team, shared._stack = object(), stack  # type: ignore[assignment]

    mod_a, mod_b, mod_c = object(), object(), object()
    team_a = SimpleNamespace(module=mod_a, fixturenames=["tmp_path", "ray_two_nodes"])
    plain_a = SimpleNamespace(module=mod_a, fixturenames=["tmp_path"])
    team_b = SimpleNamespace(module=mod_b, fixturenames=["team"])
    plain_c = SimpleNamespace(module=mod_c, fixturenames=[])
    started()
    shared.after(team_a, plain_a)  # same module: its module fixtures hold the team
    shared.after(plain_a, team_b)  # the next test needs it
    assert stops == []
    shared.after(team_b, plain_c)  # another module's test, without the team
    assert stops == ["stopped"]
    started()
    shared.after(team_b, None)  # the last test of the session
    assert stops == ["stopped", "stopped"]
    shared.after(plain_c, None)  # nothing to stop
    assert stops == ["stopped", "stopped"]
