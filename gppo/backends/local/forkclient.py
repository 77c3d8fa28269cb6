"""A testbed cell's Ray-job entrypoint when the launch has a fork server
(:mod:`gppo.backends.local.forkserver`): ``python .../forkclient.py --cell '<Cell JSON>'``.

Run as a script, by path, so that it imports the standard library only (not even the ``gppo``
package). It hands its arguments, environment, working directory and standard streams to the
server named by ``GPPO_FORK_SOCKET``, forwards SIGTERM, SIGINT and SIGHUP to the cell process the
server forks, and exits with the cell's exit code (128 + the signal's number when the cell was
killed by one). Without a server that answers, it runs the cell itself:
``python -m gppo.backends.local ARGS``, exactly the job it stands for.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

ENV_SOCKET = "GPPO_FORK_SOCKET"  # the same name as forkserver.ENV_SOCKET
PID_TIMEOUT_S = 60.0  # from the request to the cell process's pid


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


def main(argv: list[str]) -> int:
    path = os.environ.get(ENV_SOCKET)
    sock = _connect(path) if path else None
    if sock is None:
        _fallback(argv)
    assert sock is not None
    body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    cell_pid: list[int] = []
    received: list[int] = []  # signals for the cell (sent as soon as its pid is known)

    def forward(signum: int, _frame) -> None:
        received.append(signum)
        if cell_pid:
            os.kill(cell_pid[0], signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        socket.send_fds(sock, [struct.pack("!I", len(body)) + body], [0, 1, 2])
        sock.settimeout(PID_TIMEOUT_S)
        answers = _lines(sock)
        first = next(answers, "")
    except OSError:
        first = ""
    if not first.startswith("pid "):  # the server did not take it: no cell runs, run it here
        sock.close()
        _fallback(argv)
    cell_pid.append(int(first.split()[1]))
    for signum in list(received):
        os.kill(cell_pid[0], signum)
    sock.settimeout(None)
    for line in answers:
        if line.startswith("exit "):
            return int(line.split()[1])
    # no exit code: the cell was killed, by what we forwarded or by someone else
    return 128 + (received[-1] if received else signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
