"""The testbed's import-once fork server and its job-side client: a cell's Ray job without its
2-3 s of imports.

A quick-start cell trains for about 12 s and used to spend about 3 s more importing torch,
MLflow and its own code, 51 times over. During a launch on a local Ray head, one server process
imports all of that once (:func:`serve`); each cell's Ray job runs this file as a script, by path
(``python .../forkserver.py --cell '<Cell JSON>'``: :func:`client`, which imports the standard
library only, not even the ``gppo`` package; the server's own modules are imported lazily), and
hands the server its arguments, environment, working directory and standard streams over a Unix
socket. The server forks twice; the
grandchild, a fresh process with everything imported, runs ``python -m gppo.backends.local``'s
``main`` with them, writing to the job's own log. The Ray job still owns the cell:

- the grandchild's first line on the socket is its pid; the client forwards SIGTERM, SIGINT and
  SIGHUP to it (``ray job stop``, stall detection, Ctrl-C) and exits with the cell's exit code
  (128 + the signal's number when the cell was killed by one);
- the grandchild watches the socket and kills itself when the client is gone (a job SIGKILLed,
  its Ray head dead); one that cannot (frozen, stuck in a C call) is ended by the launcher, which
  finds it through :func:`gppo.processes.register` (its start-up environment is the server's,
  not the job's) when the attempt ends;
- the server runs in its own session (a terminal's Ctrl-C reaches the launcher only, which
  stops or detaches the jobs as it always did) and exits with the launcher that started it;
- anything wrong with the server (not started, gone, refusing, no pid within
  :data:`PID_TIMEOUT_S`) and the client runs the cell itself, exactly as before
  (``python -m gppo.backends.local``);
- the launcher checks the server before it hands it each job (:mod:`.forkserver_manager`: running, not
  stopped, a ping answered): one that hangs (SIGSTOP, stuck) is SIGKILLed and replaced, so no
  job, and no retry of a job that stalled on it, goes to it;
- the server starts with the environment a cell's process would have (the launcher's, the job's
  variables, then :func:`gppo.testbed.cpu_kernels.apply`), says on its ready line (:data:`READY`)
  which kernel variables it really has, and gets only the jobs whose cell would compute with the
  same ones.

Wire format: the client sends one length-prefixed JSON request ``{"argv", "env", "cwd"}`` with
its fds 0, 1, 2 attached (``SCM_RIGHTS``); the grandchild answers ``pid N\\n`` and, when the cell
returns, ``exit C\\n``; the launcher's ``{"ping": true}`` (no fds) is answered ``pong\\n`` by
the server itself. A cell killed by a signal answers nothing: the socket closes. When the
cell returns, the grandchild first sends one datagram to the launcher's notification socket
(:func:`gppo.backends.local.forkserver_manager.running`'s ``on_cell_end``): the launcher polls its jobs' status at once instead of at its next
round (a quick-start cell's slot was idle for half a poll, on average, after each cell).
"""

from __future__ import annotations

# the client runs this file by path in every cell's job: module-level imports stay the light
# standard-library ones it needs; the server's (subprocess, tempfile, pathlib, ...) are lazy
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs the client ~3 ms
if TYPE_CHECKING:
    from collections.abc import Mapping

#: the job environment variable naming the server's socket (unset: no server)
ENV_SOCKET = "GPPO_FORK_SOCKET"
#: ``GPPO_FORK_SERVER=0`` in the launcher's environment: no server, each cell imports its own
ENV_SWITCH = "GPPO_FORK_SERVER"
#: the jobs' entrypoint script: this file, run by path (:func:`client`)
CLIENT_SCRIPT = os.path.abspath(__file__)
#: the client's wait from its request to the cell process's pid (then it runs the cell itself)
PID_TIMEOUT_S = 15.0
#: what the server imports before it forks: what every cell imports before its first step
PRELOAD = (
    "torch",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
    "gppo.store.run_logger",
    "gppo.backends.local.__main__",
    "gppo.testbed.base_eval",
    "gppo.testbed.evaluate",
    "gppo.backends.local.train",
    "gppo.testbed.warmstart",
    "gppo.testbed.tasks_math",
    "gppo.testbed.tasks_code",
)
#: the server's ready line starts with this, then ``on <socket> kernels <JSON>``: the kernel
#: variables of its own environment (:data:`gppo.testbed.cpu_kernels.KERNEL_VARS`, null when
#: unset), which its torch computes with; the launcher reads it among any other output
READY = "gppo fork server ready"
HEADER = struct.Struct("!I")  # the request's length
MAX_REQUEST = 16 << 20


def enabled() -> bool:
    """Whether launches start a fork server (``GPPO_FORK_SERVER``: ``0`` / ``false`` / ``off``
    turn it off)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


def read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """One request from ``conn``: the JSON body and the fds that came with it."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
        if len(data) >= HEADER.size and HEADER.unpack_from(data)[0] > MAX_REQUEST:
            raise ValueError("request too large")
        more = conn.recv(1 << 16)
        if not more:
            raise ConnectionError("the client closed the socket mid-request")
        data += more
    (size,) = HEADER.unpack_from(data)
    return json.loads(data[HEADER.size : HEADER.size + size]), list(fds)


def _run_cell(request: Mapping, conn: socket.socket) -> int:
    """In the grandchild: become the client's cell process and run the cell; its exit code."""
    import threading
    import traceback

    from gppo.backends.local.__main__ import ENV_FORKED, main
    from gppo.processes import register

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[ENV_FORKED] = "1"
    register()  # forked from a server that predates the job: its start-up environment is not it
    sys.argv = [sys.argv[0], *request["argv"]]
    conn.sendall(f"pid {os.getpid()}\n".encode())

    def orphaned() -> None:  # the client is gone (SIGKILLed, its Ray head dead): so is the cell
        with contextlib.suppress(OSError):
            while conn.recv(1):
                pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=orphaned, name="gppo-fork-client-watch", daemon=True).start()
    try:
        code = main(list(request["argv"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    return int(code or 0)


def notify_cell_end(path: str | None) -> None:
    """Tell the launcher (its datagram socket at ``path``) that a cell has returned; best effort:
    a launcher that does not hear it finds the job's end at its next poll."""
    if not path:
        return
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        sock.sendto(b"ended", path)


def _spawn(conn: socket.socket, server_fds: list[int], notify: str | None = None) -> None:
    """Fork twice for one request (the grandchild belongs to init, not to the server);
    ``server_fds``: the server's own (listener, selector), closed in the grandchild; ``notify``:
    the launcher's datagram socket, told when the cell returns."""
    import traceback

    try:
        request, fds = read_request(conn)
    except (OSError, ValueError) as exc:
        print(f"gppo fork server: bad request: {exc}", file=sys.stderr, flush=True)
        return
    if request.get("ping"):  # the launcher's health check (:func:`ping`)
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(b"pong\n")
        return
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child:
        for fd in fds:
            os.close(fd)
        os.waitpid(child, 0)  # the middle process exits at once
        return
    code = 1
    try:
        if os.fork():
            os._exit(0)
        for fd in server_fds:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):  # as in a fresh process
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own streams)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        code = _run_cell(request, conn)
        sys.stdout.flush()
        sys.stderr.flush()
        notify_cell_end(notify)  # first: once the client has its exit line, the watcher kills us
        conn.sendall(f"exit {code}\n".encode())
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        os._exit(code)


class _Stop(Exception):
    """SIGTERM: leave the select at once."""


def serve(path: str, parent: int | None = None, notify: str | None = None) -> None:
    """Import :data:`PRELOAD`, listen on ``path``, fork a cell per connection; return when
    ``parent`` (the launcher) has gone or on SIGTERM (at once, between two forks). ``notify``:
    a datagram socket told each time a cell returns. Single-threaded: nothing is held by another
    thread when it forks."""
    import importlib

    from gppo.testbed.cpu_kernels import KERNEL_VARS

    for name in PRELOAD:
        importlib.import_module(name)
    kernels = {name: os.environ.get(name) for name in KERNEL_VARS}  # what torch computes with
    stop = False
    forking = False

    def on_term(*_args) -> None:
        nonlocal stop
        stop = True
        if not forking:
            raise _Stop

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print(f"{READY} on {path} kernels {json.dumps(kernels, sort_keys=True)}", flush=True)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    try:
        while not stop and (parent is None or os.getppid() == parent):
            if not sel.select(timeout=0.5):
                continue
            forking = True
            conn, _ = listener.accept()
            with conn:
                _spawn(conn, [listener.fileno(), sel.fileno()], notify)
            forking = False
    except _Stop:
        pass
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# --- the client: a cell's Ray job, standard library only -------------------------------------
def _fallback(argv: list[str]) -> None:
    """Run the cell in this process, as the job would without a server."""
    os.execv(sys.executable, [sys.executable, "-m", "gppo.backends.local", *argv])


def _connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def _lines(sock: socket.socket):
    """The server's answer, line by line, until the socket closes."""
    buf = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except InterruptedError:  # pragma: no cover (PEP 475 retries recv)
            continue
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode()


class _Signalled(Exception):
    """A stop signal reached the client before the server named the cell's pid."""


def client(argv: list[str]) -> int:
    """A cell's Ray job (this file run by path with the cell's ``argv``): hand the cell to the
    server named by ``GPPO_FORK_SOCKET``, forward SIGTERM, SIGINT and SIGHUP to the cell process
    it forks, and return the cell's exit code. Without a server that answers, run the cell
    itself: ``python -m gppo.backends.local ARGV``, exactly the job it stands for."""
    path = os.environ.get(ENV_SOCKET)
    sock = _connect(path) if path else None
    if sock is None:
        _fallback(argv)
    assert sock is not None
    body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    cell_pid: list[int] = []
    received: list[int] = []  # signals for the cell (sent as soon as its pid is known)
    waiting = [True]  # for the pid: a signal then ends the wait (the job is being stopped)

    def forward(signum: int, _frame) -> None:
        received.append(signum)
        if cell_pid:
            os.kill(cell_pid[0], signum)
        elif waiting[0]:
            raise _Signalled

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        socket.send_fds(sock, [struct.pack("!I", len(body)) + body], [0, 1, 2])
        sock.settimeout(PID_TIMEOUT_S)
        answers = _lines(sock)
        first = next(answers, "")
        waiting[0] = False
    except (OSError, _Signalled):
        first = ""
    waiting[0] = False
    if not first.startswith("pid "):  # the server did not take it (stopped, gone, too slow)
        sock.close()  # a cell it forks later sees the socket closed and kills itself
        if received:  # the job was stopped meanwhile: no cell at all
            return 128 + received[-1]
        _fallback(argv)  # run the cell here
    cell_pid.append(int(first.split()[1]))
    for signum in list(received):
        os.kill(cell_pid[0], signum)
    sock.settimeout(None)
    for line in answers:
        if line.startswith("exit "):
            return int(line.split()[1])
    # no exit code: the cell was killed, by what we forwarded or by someone else
    return 128 + (received[-1] if received else signal.SIGKILL)


# --- the server's command line -----------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gppo.backends.local.forkserver")
    ap.add_argument("--socket", required=True, help="the Unix socket to listen on")
    ap.add_argument("--parent", type=int, help="exit when this process is gone")
    ap.add_argument("--notify", help="a datagram socket told each time a cell returns")
    args = ap.parse_args(argv)
    try:
        serve(args.socket, args.parent, args.notify)
    except Exception as exc:
        print(f"gppo fork server failed: {exc!r}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__" and __spec__ is None:  # run by path: a cell's job (the client)
    sys.exit(client(sys.argv[1:]))
elif __name__ == "__main__":  # python -m gppo.backends.local.forkserver: the server
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown of torch and MLflow (a second): nothing is left open
