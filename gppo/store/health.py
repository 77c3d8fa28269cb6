"""Is the tracking store answering? A quick probe the launcher makes before it writes.

MLflow's REST client retries a failed call for about two minutes before it raises
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``..._BACKOFF_FACTOR``), which is what the cells need to
ride out a restart of the tracking server; the launcher instead asks the server's ``/health``
with a short timeout each round, so it can say at once that the server went away, hold its own
writes (submissions, the endings of runs) until it is back, and give up after
``tracking.unreachable_timeout_s``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import urllib.error
import urllib.request
from collections.abc import Iterator

#: Seconds the probe waits for an answer.
PROBE_TIMEOUT_S = 3.0


def tracking_unreachable(uri: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the tracking server at ``uri`` does not answer, or None when it does. Stores that are
    not HTTP servers (SQLite files, a database URL) are not probed: None."""
    if not uri.startswith(("http://", "https://")):
        return None
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as answer:
            if answer.status == 200:
                return None
            return f"/health answered {answer.status}"
    except urllib.error.HTTPError as exc:
        return f"/health answered {exc.code}"
    except (OSError, ValueError) as exc:  # refused, reset, timed out, DNS
        return f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"


#: what a store says when its disk is full (SQLite, PostgreSQL, the OS)
DISK_FULL_SIGNS = ("database or disk is full", "No space left on device", "could not extend file")


def is_disk_full(exc: BaseException) -> bool:
    """Whether an exception from a store write means its disk is full (ENOSPC)."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return any(sign in str(exc) for sign in DISK_FULL_SIGNS)


def is_unreachable_error(exc: BaseException) -> bool:
    """Whether an exception from an MLflow call means the store did not answer (as opposed to a
    refusal of the request itself)."""
    text = f"{type(exc).__name__}: {exc}"
    signs = (
        "Max retries exceeded",
        "Connection refused",
        "ConnectionError",
        "ConnectionResetError",
        "RemoteDisconnected",
        "Read timed out",
        "OperationalError",
        "503",
    )
    return isinstance(exc, OSError) or any(sign in text for sign in signs)


#: MLflow's REST client settings the launcher uses for its own calls (:func:`fail_fast`).
FAIL_FAST_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


@contextlib.contextmanager
def fail_fast(uri: str) -> Iterator[None]:
    """Within the block, this process's MLflow REST calls to ``uri`` fail at once instead of
    retrying for minutes (MLflow reads these variables at each request), so the launcher sees an
    outage that starts between its probe and its call. Variables the user set are kept; the
    launcher starts no process inside the block, so the cells keep MLflow's default retries."""
    if not uri.startswith(("http://", "https://")):
        yield
        return
    added = {k: v for k, v in FAIL_FAST_ENV.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
