"""The processes a pytest process of the suite started, and the orphans among them.

tests/conftest.py puts :data:`TEST_WORKER_ENV` in each pytest process's environment, so every
process it starts carries it (inherited); after a slow test the orphans (parent gone) are ended.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection

import psutil

#: ``<suite folder>:<worker>`` in the environment of every process one pytest process starts
#: (inherited), so that what a test leaves behind can be found and ended (:func:`reap_orphans`)
TEST_WORKER_ENV = "GPPO_TEST_WORKER"
#: set in the environment of a process a fixture daemonizes on purpose (PostgreSQL's postmaster,
#: started by ``pg_ctl``: an orphan from its first second that lives as long as its fixture);
#: :func:`reap_orphans` leaves it alone until the session's end
DAEMON_ENV = "GPPO_TEST_DAEMON"
#: the fixtures that stand on the team's services, started together for the tests that need them
#: (tests/sweep/servers.py's ``SharedTeam``; tests/conftest.py's ``TEAM_TESTS``)
TEAM_FIXTURES = frozenset({"team", "ray_two_nodes", "postgres", "mlflow_server"})


def started_here() -> dict[tuple[int, float], psutil.Process]:
    """The live processes this pytest process started, by (pid, start time): those whose
    environment carries its :data:`TEST_WORKER_ENV` (not itself: its own /proc environ predates
    the variable)."""
    mine = os.environ.get(TEST_WORKER_ENV)
    out = {}
    for proc in psutil.process_iter(["pid", "create_time"]):
        with contextlib.suppress(psutil.Error):
            if mine is not None and proc.environ().get(TEST_WORKER_ENV) == mine:
                out[proc.info["pid"], proc.info["create_time"]] = proc
    return out


#: the ``sleep 1`` of the shell Ray's job supervisor leaves to watch a driver: gone within 1 s
RAYS_WATCHER_SLEEP = ["sleep", "1"]


def reap_orphans(before: Collection[tuple[int, float]] = (), *, daemons: bool = False) -> list[str]:
    """SIGKILL the processes this pytest process started (not in ``before``) whose parent is
    gone (reparented to init): what a test's SIGKILL of a Ray head leaves (its dashboard and
    runtime-env agents outlive their raylet and take CPU from every later test). A fixture's
    daemon (:data:`DAEMON_ENV` in its environment) is spared unless ``daemons`` (the session's
    end, every fixture torn down). Returns their names."""
    reaped = []
    for key, proc in started_here().items():
        if key in before:
            continue
        with contextlib.suppress(psutil.Error):
            if not daemons and DAEMON_ENV in proc.environ():
                continue
            if proc.ppid() == 1 and proc.cmdline() != RAYS_WATCHER_SLEEP:
                reaped.append(f"{proc.name()} ({proc.pid})")
                proc.kill()
    return reaped
