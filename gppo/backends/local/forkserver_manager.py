"""The launcher's side of the testbed's fork server (:mod:`.forkserver`): start it, keep it
healthy, end it.

:func:`running` starts one server per launch (its socket and log in a private temporary folder)
and a datagram socket the cells tell when they return. The server's environment is built as a
cell's process builds its own (:func:`server_env`: the launcher's, the jobs' variables over it,
then :func:`gppo.testbed.cpu_kernels.apply` of the mode), and its ready line, found among any
other output on its stdout (:class:`ReadyLine`), says which kernel variables it really has: a job
goes to it only when its cell would compute with the same (:meth:`Server.serves`). :class:`Server` is asked for the socket
once per job: before it hands the server a job it checks that the server still serves (its
process runs, is not stopped, and answers a ping); one that does not (frozen by SIGSTOP, stuck,
gone) is SIGKILLed and replaced, the jobs importing their own modules meanwhile, so no job, and
no retry of a job that stalled on it, goes to a server that hangs. Every server it started is
ended, for certain, when the launch ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from gppo.backends.local.forkserver import HEADER, READY
from gppo.processes import registry
from gppo.testbed import cpu_kernels

#: the server's module, run as ``python -m`` (:func:`gppo.backends.local.forkserver.main`)
SERVER_MODULE = "gppo.backends.local.forkserver"
#: the launcher's wait for a server's answer to a ping before each job (then it is replaced)
PING_TIMEOUT_S = 5.0
#: servers started after the first when one stops serving; then the cells import their own
MAX_REPLACEMENTS = 2
#: a server's wait to exit on SIGTERM before SIGKILL
STOP_WAIT_S = 30.0


class Server:
    """The launch's fork server, kept healthy: :meth:`path` is asked once per job.

    The first call waits (once) until the server has imported everything. Every call checks that
    the server still serves (its process runs, is not stopped and answers a ping within
    :data:`PING_TIMEOUT_S`): a server that does not (frozen by SIGSTOP, stuck, gone) is SIGKILLed
    and replaced (at most :data:`MAX_REPLACEMENTS` times), so a cell retried after a stall is
    never handed to the server that stalled it; meanwhile, and after the last replacement, the
    jobs import their own modules (:meth:`path` is None). Each such change is said once, on
    stderr."""

    def __init__(
        self,
        folder: str,
        env: Mapping[str, str],
        timeout_s: float,
        notify: str | None,
        kernels: str = cpu_kernels.PINNED,
    ):
        self.folder, self.env, self.timeout_s, self.notify = folder, dict(env), timeout_s, notify
        self.mode = kernels
        #: the kernel variables the current server reported on its ready line (None: not yet)
        self.kernels: dict[str, str | None] | None = None
        self._out: ReadyLine | None = None
        #: every server process started (the current one last), each ended by :meth:`close`
        self.started: list[subprocess.Popen] = []
        self.proc: subprocess.Popen | None = None
        self.socket_path = ""
        self.log: Path  # the current server's stderr
        self._ready: bool | None = None
        self._since = 0.0  # monotonic start of the current server
        self._start()

    def _start(self) -> None:
        n = len(self.started)
        self.socket_path = os.path.join(self.folder, f"cells{n or ''}.sock")
        self.log = Path(self.folder, f"server{n or ''}.log")
        cmd = [sys.executable, "-m", SERVER_MODULE, "--socket", self.socket_path]
        cmd += ["--parent", str(os.getpid())]
        if self.notify:
            cmd += ["--notify", self.notify]
        with self.log.open("w") as err:
            proc = subprocess.Popen(
                cmd,
                env=server_env(self.env, self.mode),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,  # a terminal's Ctrl-C is the launcher's to handle
            )
        self.started.append(proc)
        self.proc, self._ready, self._since = proc, None, time.monotonic()
        self.kernels, self._out = None, ReadyLine(proc)

    def path(self) -> str | None:
        """The socket of a server that serves now, or None: the job imports its own modules."""
        if self.proc is None:  # given up
            return None
        if self._ready is None:
            first = len(self.started) == 1  # the launch's first jobs wait for its imports
            waited = time.monotonic() - self._since
            assert self._out is not None
            kernels = self._out.wait(self.timeout_s if first else 0.0)
            if kernels is not None:
                self._ready, self.kernels = True, kernels
            elif first or waited > self.timeout_s or self.proc.poll() is not None:
                lines = self.log.read_text(errors="replace").strip().splitlines()
                self._give_up(f"did not start ({lines[-1] if lines else 'no output'})")
                return None
            else:  # a replacement still importing: this job does without it
                return None
        why = _unhealthy(self.proc, self.socket_path)
        if why:
            self._replace(why)
            return None
        return self.socket_path

    def serves(self, job_env: Mapping[str, str]) -> bool:
        """Whether a job with ``job_env`` may go to the current server: it has said it is ready
        (:meth:`path` first) and its kernel variables are those the job's cell would compute
        with (:func:`same_kernels_as`)."""
        return self.kernels is not None and same_kernels_as(self.kernels, job_env)

    def _replace(self, why: str) -> None:
        assert self.proc is not None
        pid = self.proc.pid
        _kill(self.proc)
        if len(self.started) > MAX_REPLACEMENTS:
            self._give_up(f"(pid {pid}) {why}: ended it", end=False)
            return
        self._start()
        print(
            f"gppo: the cells' fork server (pid {pid}) {why}: ended it and started another; "
            "until it is ready each cell imports its own modules",
            file=sys.stderr,
            flush=True,
        )

    def _give_up(self, why: str, *, end: bool = True) -> None:
        if end and self.proc is not None:
            _kill(self.proc)
        self.proc = None
        print(
            f"gppo: the cells' fork server {why}; each cell imports its own modules",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        """End every server process started, for certain: SIGTERM (and SIGCONT, so a stopped
        one can act on it), then SIGKILL after :data:`STOP_WAIT_S`."""
        for proc in self.started:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.terminate()
                    os.kill(proc.pid, signal.SIGCONT)
                try:
                    proc.wait(timeout=STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    _kill(proc)
            if proc.stdout is not None:
                proc.stdout.close()


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL (which a stopped process cannot ignore either) and reap."""
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()


def _unhealthy(proc: subprocess.Popen, path: str) -> str:
    """Why the server ``proc`` listening on ``path`` does not serve ("" when it does): exited,
    stopped (SIGSTOP, a debugger), or no answer to a ping within :data:`PING_TIMEOUT_S`."""
    if proc.poll() is not None:
        return f"exited (code {proc.returncode})"
    with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/stat") as fh:
        state = fh.read().rpartition(")")[2].split()[0]
        if state in ("T", "t"):
            return "is stopped"
    if not ping(path, PING_TIMEOUT_S):
        return f"did not answer a ping within {PING_TIMEOUT_S:g} s"
    return ""


def ping(path: str, timeout_s: float) -> bool:
    """Whether the server on ``path`` answers a ping (``{"ping": true}``: ``pong``, no fork)
    within ``timeout_s``."""
    body = json.dumps({"ping": True}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(path)
            sock.sendall(HEADER.pack(len(body)) + body)
            return sock.recv(16).startswith(b"pong")
        except OSError:
            return False


@contextlib.contextmanager
def notified(path: str, on_cell_end: Callable[[], None] | None) -> Iterator[str | None]:
    """A datagram socket at ``path`` whose every message calls ``on_cell_end`` (in a daemon
    thread); ``None`` and nothing started without a callback."""
    if on_cell_end is None:
        yield None
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)

    def listen() -> None:
        while sock.recv(64) == b"ended":
            on_cell_end()

    thread = threading.Thread(target=listen, name="gppo-fork-notify", daemon=True)
    thread.start()
    try:
        yield path
    finally:
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(b"stop", path)  # ends the thread's recv
        thread.join(timeout=5)
        sock.close()


@contextlib.contextmanager
def running(
    env: Mapping[str, str],
    timeout_s: float = 120.0,
    on_cell_end: Callable[[], None] | None = None,
    kernels: str = cpu_kernels.PINNED,
) -> Iterator[Server]:
    """Start a server for this process's launch (``env``: the cells' job environment, e.g. the
    OpenMP thread count that torch reads when it is imported; ``kernels``: the CPU kernels' mode
    it computes in, applied as a cell applies it: :func:`server_env`). It imports while the launch
    starts its Ray head; :meth:`Server.path` waits for it, and replaces it when it no longer
    serves. ``on_cell_end`` is called (from another thread) each time a cell returns. Every
    server process it started is ended on exit."""
    registry()  # where the cells register: another user's, or open to all, refuses the launch
    folder = tempfile.mkdtemp(prefix="gppo-fork-")
    try:
        with notified(os.path.join(folder, "ended.sock"), on_cell_end) as notify:
            server = Server(folder, env, timeout_s, notify, kernels)
            try:
                yield server
            finally:
                server.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def server_env(env: Mapping[str, str], mode: str = cpu_kernels.PINNED) -> dict[str, str]:
    """The server's start environment, built as a cell's process builds its own: this process's
    environment, ``env`` (the jobs' variables) over it, then :func:`cpu_kernels.apply` of
    ``mode`` (pinned: the pin set, ``MKL_DEBUG_CPU_TYPE`` and the other dropped ones removed)."""
    out = {**os.environ, **env}
    cpu_kernels.apply(mode, out)
    return out


def cell_kernels(job_env: Mapping[str, str]) -> dict[str, str | None]:
    """The kernel variables the cell of a job with ``job_env`` computes with: its process's
    environment (this one's, the job's over it) after :func:`cpu_kernels.apply` of its mode (a
    job that carries the whole pin is pinned, as :func:`cpu_kernels.job_env` makes it)."""
    pinned = all(job_env.get(k) == v for k, v in cpu_kernels.PINNED_ENV.items())
    env = {**os.environ, **job_env}
    cpu_kernels.apply(cpu_kernels.PINNED if pinned else cpu_kernels.NATURAL, env)
    return {name: env.get(name) for name in cpu_kernels.KERNEL_VARS}


def same_kernels_as(reported: Mapping[str, str | None], job_env: Mapping[str, str]) -> bool:
    """Whether a server that ``reported`` these kernel variables (its ready line) computes as
    the cell of a job with ``job_env`` would (:func:`cell_kernels`)."""
    cell = cell_kernels(job_env)
    return all(reported.get(name) == cell[name] for name in cpu_kernels.KERNEL_VARS)


class ReadyLine:
    """The server's ready line (:data:`~gppo.backends.local.forkserver.READY`), looked for in
    all its stdout: lines before it (an import that prints) are passed over, a line is read in
    pieces across calls, and the kernel variables it reports are returned."""

    def __init__(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buffer = b""
        self.closed = False

    def wait(self, timeout_s: float) -> dict[str, str | None] | None:
        """The kernel variables of the ready line once the server has printed it (within
        ``timeout_s``; 0: what is there now), else None."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self._found()
            if found is not None or self.closed:
                return found
            left = deadline - time.monotonic()
            with selectors.DefaultSelector() as sel:
                sel.register(self.fd, selectors.EVENT_READ)
                if not sel.select(max(0.0, left)):
                    return None
            chunk = os.read(self.fd, 65536)
            self.closed = not chunk
            self.buffer += chunk

    def _found(self) -> dict[str, str | None] | None:
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            text = line.decode(errors="replace")
            if READY in text:
                _, _, tail = text.partition(" kernels ")
                try:
                    kernels = json.loads(tail) if tail else {}
                except ValueError:
                    kernels = {}
                return kernels if isinstance(kernels, dict) else {}
        return None
