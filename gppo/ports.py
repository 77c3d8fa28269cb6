"""Free loopback ports on this machine: for a local Ray head's components, a test server, or a
single-rank process group's rendezvous."""

from __future__ import annotations

import contextlib
import socket


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports. The sockets are held open together while the OS picks
    them, so no two are the same (one socket at a time can hand out a port twice, and Ray refuses
    to start when two of its components are given one port)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def free_port() -> int:
    """One free loopback port (use :func:`free_ports` for several that must differ)."""
    return free_ports(1)[0]
