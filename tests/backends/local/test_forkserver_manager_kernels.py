"""The fork server's kernels and its ready line (issue 57, item 10): its environment is built as a
cell's (``MKL_DEBUG_CPU_TYPE`` from the launcher dropped under the pin), a job goes to it only when
the kernels it reports are the ones the job's cell would compute with, and a stray line on its
stdout before the ready line does not turn it off."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gppo.backends.local import forkserver_manager
from gppo.backends.local.backend import SERVER_ENV, LocalBackend
from gppo.testbed import cpu_kernels

PINNED_KERNELS = {name: cpu_kernels.PINNED_ENV.get(name) for name in cpu_kernels.KERNEL_VARS}


def printing(script: str) -> subprocess.Popen:
    """A process standing in for a server: it prints what ``script`` prints."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE)


def test_the_server_env_drops_what_the_pin_drops_from_the_launchers_env(monkeypatch):
    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "5")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX512")
    env = forkserver_manager.server_env(SERVER_ENV, cpu_kernels.PINNED)
    assert "MKL_DEBUG_CPU_TYPE" not in env and "MKL_ENABLE_INSTRUCTIONS" not in env
    assert {k: env[k] for k in cpu_kernels.PINNED_ENV} == cpu_kernels.PINNED_ENV
    assert env["OMP_NUM_THREADS"] == SERVER_ENV["OMP_NUM_THREADS"]
    natural = forkserver_manager.server_env(
        {}, cpu_kernels.NATURAL
    )  # natural: the launcher's as it is
    assert natural["MKL_DEBUG_CPU_TYPE"] == "5"


def test_a_job_goes_only_to_a_server_that_reports_its_cells_kernels(monkeypatch, tmp_path):
    from helpers import make_cell

    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "5")  # the launcher's: a pinned cell drops it
    backend = LocalBackend()
    pinned = backend.job(make_cell("tv", "mc")).env
    natural = backend.job(make_cell("tv", "mc", settings={"cpu_kernels": "natural"})).env
    assert forkserver_manager.same_kernels_as(PINNED_KERNELS, pinned)
    assert not forkserver_manager.same_kernels_as(PINNED_KERNELS, natural)
    # a server that kept MKL_DEBUG_CPU_TYPE (its env merged over the pin) computes otherwise
    kept = {**PINNED_KERNELS, "MKL_DEBUG_CPU_TYPE": "5"}
    assert not forkserver_manager.same_kernels_as(kept, pinned)
    assert forkserver_manager.cell_kernels(natural)["MKL_DEBUG_CPU_TYPE"] == "5"


@pytest.mark.slow  # a process
def test_the_ready_line_is_found_after_stray_output_and_in_pieces():
    proc = printing(
        """
        import sys, time
        print("a library says hello on import", flush=True)
        sys.stdout.write("partial "); sys.stdout.flush(); time.sleep(0.3)
        print("line", flush=True)
        sys.stdout.write('gppo fork server ready on /x kernels {"MKL_CBWR": "COMPATIBLE", '); sys.stdout.flush()
        time.sleep(0.3)
        print('"MKL_DEBUG_CPU_TYPE": null}', flush=True)
        time.sleep(30)
        """
    )
    try:
        ready = forkserver_manager.ReadyLine(proc)
        assert ready.wait(0.0) is None  # not yet: nothing printed
        found = ready.wait(30.0)
        assert found == {"MKL_CBWR": "COMPATIBLE", "MKL_DEBUG_CPU_TYPE": None}
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.mark.slow  # two processes
def test_a_server_that_exits_or_stays_silent_is_not_ready():
    gone = printing('print("no ready line here")')
    silent = printing("import time; time.sleep(30)")
    try:
        assert forkserver_manager.ReadyLine(gone).wait(30.0) is None
        assert forkserver_manager.ReadyLine(silent).wait(0.5) is None
    finally:
        for proc in (gone, silent):
            proc.kill()
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()


@pytest.mark.slow  # a real server: imports torch and MLflow
def test_a_real_server_reports_and_has_the_pinned_kernels_whatever_the_launcher_has(monkeypatch):
    from helpers import make_cell

    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "5")
    with forkserver_manager.running(SERVER_ENV, kernels=cpu_kernels.PINNED) as server:
        assert server.path() is not None, server.log.read_text()
        assert server.kernels == PINNED_KERNELS
        assert server.proc is not None
        with open(f"/proc/{server.proc.pid}/environ", "rb") as fh:
            names = {item.split(b"=", 1)[0].decode() for item in fh.read().split(b"\0") if item}
        assert "MKL_DEBUG_CPU_TYPE" not in names
        backend = LocalBackend()
        assert server.serves(backend.job(make_cell("tv", "mc")).env)
        natural = backend.job(make_cell("tv", "mc", settings={"cpu_kernels": "natural"}))
        assert not server.serves(natural.env)
