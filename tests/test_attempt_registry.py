"""The attempt registry (gppo.processes, issue 46): created private (0700); one that another
user owns or others can write is refused in one line (nothing registered, nothing signalled, no
launch with the fork server); an entry is trusted only for the process that wrote it (its start
time and command line), so a planted entry never gets a process signalled."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from gppo import processes
from gppo.errors import UnsafeRegistry


@pytest.fixture
def tmpdir_root(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"gppo-attempts-{os.getuid()}"


@pytest.fixture
def bystander():
    """A process of this user's that no attempt owns (what a planted entry would target)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


def _plant(root, attempt: str, proc: psutil.Process, cmdline=None) -> None:
    folder = root / attempt
    folder.mkdir(parents=True, exist_ok=True)
    entry = folder / f"{proc.pid}-{proc.create_time()!r}"
    entry.write_text(json.dumps(proc.cmdline() if cmdline is None else cmdline))


def test_the_registry_is_created_private_and_a_registered_process_is_found(tmpdir_root):
    processes.register("gppo-s-c-a1")
    assert stat.S_IMODE(tmpdir_root.stat().st_mode) == 0o700
    assert [p.pid for p in processes.attempt_processes("gppo-s-c-a1")] == [os.getpid()]


@pytest.mark.slow  # a real process that must not be signalled
def test_a_registry_writable_by_others_is_refused_and_nothing_is_signalled(tmpdir_root, bystander):
    tmpdir_root.mkdir(mode=0o700)
    tmpdir_root.chmod(0o777)  # as another user who made it first would leave it
    _plant(tmpdir_root, "gppo-s-c-a1", psutil.Process(bystander.pid))
    with pytest.raises(UnsafeRegistry) as refused:
        processes.registry()
    assert "writable by others" in str(refused.value) and "\n" not in str(refused.value)
    ended = processes.end_attempt("gppo-s-c-a1", grace_s=0.5)
    assert ended.found == [] and bystander.poll() is None  # not signalled
    from gppo.backends.local import forkserver_manager

    with pytest.raises(UnsafeRegistry), forkserver_manager.running({}):
        pass  # a launch with the fork server stops here, before anything is started


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the folder to another user")
def test_a_registry_another_user_owns_is_refused(tmpdir_root):
    tmpdir_root.mkdir(mode=0o700)
    os.chown(tmpdir_root, 65534, 65534)
    with pytest.raises(UnsafeRegistry, match="owned by uid 65534"):
        processes.registry()


@pytest.mark.slow
def test_an_entry_is_trusted_only_for_the_process_that_wrote_it(tmpdir_root, bystander):
    processes.registry()
    _plant(tmpdir_root, "gppo-s-c-a1", psutil.Process(bystander.pid), cmdline=["python"])
    ended = processes.end_attempt("gppo-s-c-a1", grace_s=0.5)
    assert ended.found == [] and bystander.poll() is None
