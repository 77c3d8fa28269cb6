"""A store read that must not wait: what ``plan`` and ``status`` ask the store for (the earlier
runs' times their forecast is made from) they can do without.

MLflow's REST client retries a call to a server that does not answer for minutes
(:mod:`gppo.store.health`), and a database URL can hang on its connection. :func:`read_within`
first asks an HTTP server's ``/health`` with a short timeout, then runs the read in a daemon
thread and waits at most ``seconds`` for it: a server that is down, a store that errs or one that
is too slow gives no value and one line saying why, never a wait or a traceback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from gppo.store.health import PROBE_TIMEOUT_S, tracking_unreachable
from gppo.store.uri import redact

T = TypeVar("T")

#: seconds a read that can be done without waits for the store
STORE_WAIT_S = 5.0


def read_within(
    uri: str, read: Callable[[], T], seconds: float | None = None
) -> tuple[T | None, str | None]:
    """``(read(), None)`` when the store at ``uri`` answers within ``seconds`` (default
    :data:`STORE_WAIT_S`), else ``(None, why)``: ``why`` names the store (password redacted) and
    what went wrong."""
    seconds = STORE_WAIT_S if seconds is None else seconds
    where = redact(uri)
    down = tracking_unreachable(uri, timeout=min(seconds, PROBE_TIMEOUT_S))
    if down is not None:
        return None, f"the store at {where} does not answer ({down})"
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = read()
        except Exception as exc:  # any failure of the read: the caller goes on without it
            box["error"] = exc

    thread = threading.Thread(target=run, name="store-read", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():  # left to finish or fail on its own; nothing waits for it
        return None, f"the store at {where} did not answer within {seconds:g} s"
    if "error" in box:
        exc = box["error"]
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return None, f"the store at {where} could not be read ({type(exc).__name__}: {first})"
    return box["value"], None
