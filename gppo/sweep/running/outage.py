"""One outage clock: how long a service (the Ray cluster, the tracking server) has not answered.

:class:`OutageClock` is the one state machine behind both of a launch's waits: the first failed
call starts the clock and reports an ``outage`` event, the first answer after it stops the clock and
reports ``recovered`` (with how long it was away), and :meth:`OutageClock.expired` says when the
service has been away for its limit (``ray.unreachable_timeout_s``,
``tracking.unreachable_timeout_s``), with the one line to give up with (:meth:`OutageClock.gave_up`).
What to do meanwhile (hold submissions) and then (raise) is the caller's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: each service as a line names it, and the spec key of its limit
SERVICES = {
    "cluster": ("the Ray cluster", "ray.unreachable_timeout_s"),
    "tracking": ("the tracking server", "tracking.unreachable_timeout_s"),
}


class OutageClock:
    """The outage state of one service.

    Args:
        service: ``"cluster"`` or ``"tracking"`` (the events' ``service``).
        where: its address, for the lines that name it.
        limit_s: how long it may stay away before :meth:`expired` says so.
        on_change: called as ``on_change(kind, clock)`` with ``kind`` ``"outage"`` (the first
            failure) or ``"recovered"`` (the first answer after it); :attr:`error` and
            :meth:`down_s` tell the rest.
        clock: the monotonic clock (tests).
    """

    def __init__(
        self,
        service: str,
        where: str,
        limit_s: float,
        on_change: Callable[[str, OutageClock], None] = lambda _k, _c: None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service, self.where, self.limit_s = service, where, limit_s
        self.on_change, self.clock = on_change, clock
        self.since: float | None = None  # clock() of the first failure of this outage
        self.error = ""  # the last failure's reason
        self.last_down_s = 0.0  # how long the last outage lasted (set on recovery)

    @property
    def down(self) -> bool:
        return self.since is not None

    def down_s(self) -> float:
        """Seconds since this outage began (0 when the service answers)."""
        return 0.0 if self.since is None else self.clock() - self.since

    def failed(self, why: str) -> None:
        """A call got no answer (``why``: one short line)."""
        self.error = why
        if self.since is None:
            self.since = self.clock()
            self.on_change("outage", self)

    def answered(self) -> None:
        """A call got an answer."""
        if self.since is not None:
            self.last_down_s = self.clock() - self.since
            self.since = None
            self.on_change("recovered", self)

    def observe(self, why: str | None) -> bool:
        """A call's result: ``why`` it got no answer, or None when it got one; True if it did."""
        if why is None:
            self.answered()
        else:
            self.failed(why)
        return why is None

    def check(self, error: type[Exception], source: object, left: str) -> None:
        """Raise ``error`` with :meth:`gave_up`'s line once :meth:`expired`."""
        if self.expired():
            raise error(self.gave_up(source, left))

    def expired(self) -> bool:
        """True once the service has been away for ``limit_s`` or longer."""
        return self.since is not None and self.down_s() >= self.limit_s

    @property
    def what(self) -> str:
        """``the Ray cluster`` / ``the tracking server``."""
        return SERVICES[self.service][0]

    def gave_up(self, source: object, left: str) -> str:
        """The one line to stop with: ``source`` (the spec) and what was left as it is."""
        return (
            f"{source}: {self.what} at {self.where} has not answered for {self.down_s():.0f} s "
            f"({SERVICES[self.service][1]} = {self.limit_s:g}; last error: {self.error}); {left}"
        )
