"""Ctrl-C and SIGTERM for the long-running loops (launch, tune), routed to an event."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any


def signals_set(stop_event: threading.Event) -> Callable[[], None]:
    """Route SIGINT and SIGTERM to ``stop_event`` while a loop (launch, tune) runs.

    A raised KeyboardInterrupt can land inside a library's finaliser, where Python ignores it
    ("Exception ignored in ..."), and the Ctrl-C would be lost; an event is never lost. The loop
    sees it within one poll and stops (or detaches) cleanly. A second signal raises at once.
    Returns the function that restores the previous handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(_sig: int, _frame: Any) -> None:
        if stop_event.is_set():
            raise KeyboardInterrupt
        stop_event.set()

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, previous in old.items():
            signal.signal(sig, previous)

    return restore
