"""An attempt's processes are found wherever they are on this machine and ended for certain:
one that ignores SIGTERM, one frozen (SIGSTOP) in a session of its own (outside the job's process
group, as the fork server's cells and Ray's actors are), one that registered itself; another
attempt's process is left alone. Real processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from gppo import processes
from gppo.processes import ENV_ATTEMPT, attempt_processes, end_attempt, exit_signal

IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
REGISTER = (
    "import os, time; from gppo.processes import register; "
    "register(os.environ['LATER_ATTEMPT']); print('ok', flush=True); time.sleep(600)"
)


def _start(code: str, env: dict[str, str], *, own_session: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        start_new_session=own_session,
        stdout=subprocess.PIPE,
        text=True,
    )


def _gone(proc: subprocess.Popen) -> bool:
    proc.poll()  # our child: reap it, so it is not a zombie we keep
    return not psutil.pid_exists(proc.pid) or proc.returncode is not None


@pytest.mark.slow
def test_every_process_of_an_attempt_is_ended_and_confirmed_gone(tmp_path):
    attempt, other = f"gppo-test-{os.getpid()}-a1", f"gppo-test-{os.getpid()}-b1"
    ignoring = _start(IGNORE_TERM, {ENV_ATTEMPT: attempt})
    frozen = _start(IGNORE_TERM, {ENV_ATTEMPT: attempt}, own_session=True)
    registered = _start(REGISTER, {"LATER_ATTEMPT": attempt})  # not in its start-up environment
    bystander = _start(IGNORE_TERM, {ENV_ATTEMPT: other})
    procs = [ignoring, frozen, registered, bystander]
    try:
        assert registered.stdout is not None and registered.stdout.readline().strip() == "ok"
        time.sleep(0.5)  # the ignoring ones have set their handler
        os.kill(frozen.pid, signal.SIGSTOP)
        found = {p.pid for p in attempt_processes(attempt)}
        assert found == {ignoring.pid, frozen.pid, registered.pid}
        t0 = time.monotonic()
        ended = end_attempt(attempt, grace_s=1.0)
        took = time.monotonic() - t0
        assert sorted(ended.found) == sorted(found)
        # the registered one exits on SIGTERM; the other two need SIGKILL after the grace
        assert sorted(ended.killed) == sorted([ignoring.pid, frozen.pid]), ended
        assert ended.survivors == []
        assert took >= 1.0
        assert "SIGKILLed after 1 s grace" in ended.note
        for p in (ignoring, frozen, registered):
            assert _gone(p), p.pid
        assert not _gone(bystander)  # another attempt's process
        assert attempt_processes(attempt) == []
        assert not (processes.registry_root() / attempt).exists()
        assert end_attempt(attempt).found == []  # nothing left: returns at once, says nothing
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_the_signal_a_driver_died_of_is_named_from_its_exit_code():
    assert exit_signal(-9) == "SIGKILL"
    assert exit_signal(137) == "SIGKILL"  # a shell's, or the fork server client's, 128 + 9
    assert exit_signal(143) == "SIGTERM"
    assert exit_signal(0) is None and exit_signal(1) is None and exit_signal(None) is None
    assert exit_signal(200) is None
