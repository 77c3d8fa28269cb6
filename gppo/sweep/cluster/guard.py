"""Refuse a remote Ray cluster with a tracking store only this machine can see.

A job on another node opens ``MLFLOW_TRACKING_URI`` itself: a SQLite file or ``file:`` folder on
the launcher's disk is not there (the job fails, or logs into a file nobody reads). So before
anything is written or submitted, :func:`check_store_reachable` refuses the combination

* a Ray address (``--address``, ``ray.address`` or ``RAY_ADDRESS``) whose host is not loopback,
  i.e. not a head on this machine (a head this package starts is always on 127.0.0.1), and
* a local tracking store (``sqlite:``, ``file:`` or a bare path),

unless the spec confirms the path is on a filesystem every node mounts at the same place
(``tracking.shared_filesystem: true``). A tracking server (``http(s)://``) or a database server
(``postgresql://``, ``mysql://``) is reachable from every node and always passes.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

from gppo.errors import StoreNotShared
from gppo.store.uri import is_local_store

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def resolve_address(address: str | None) -> str | None:
    """The Ray address a sweep would use: ``address`` (flag or spec), else ``RAY_ADDRESS``."""
    return address or os.environ.get("RAY_ADDRESS") or None


def is_loopback_address(address: str) -> bool:
    """True when the Ray address names this machine through loopback (127.0.0.0/8, ::1)."""
    text = address if "://" in address else f"http://{address}"
    host = (urlsplit(text).hostname or "").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_store_reachable(
    address: str | None, tracking_uri: str, *, shared_filesystem: bool, where: str | None = None
) -> None:
    """Raise :class:`StoreNotShared` when a remote cluster's jobs could not open the store.

    Args:
        address: the Ray address given by flag or spec (``RAY_ADDRESS`` is consulted here too).
        tracking_uri: the resolved MLflow tracking URI (or Optuna storage URL).
        shared_filesystem: ``tracking.shared_filesystem`` of the spec.
        where: the spec file, named first in the message (else the caller prefixes it).
    """
    addr = resolve_address(address)
    if addr is None or is_loopback_address(addr) or shared_filesystem:
        return
    if not is_local_store(tracking_uri):
        return
    raise StoreNotShared(
        (f"{where}: " if where else "")
        + f"tracking.uri: {tracking_uri} is a file on this machine, which the jobs of the "
        f"Ray cluster at {addr} cannot open; set tracking.uri to a tracking server "
        "(http://HOST:PORT of `mlflow server`), or put the store on a filesystem every node "
        "mounts at the same path and set tracking.shared_filesystem: true; nothing was submitted"
    )
