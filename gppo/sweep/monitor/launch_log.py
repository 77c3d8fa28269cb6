"""A launch as a log: one timestamped line per event when stdout is not a terminal.

``gppo-sweep launch > log.txt`` (CI, ``nohup``) must not receive fragments of the live table.
:class:`LaunchLog` prints each :class:`~gppo.sweep.running.attempts.Event` the launcher reports
(:meth:`LaunchLog.event`, its ``on_event``: submitted, re-attached, running, finished with its
avg@k, failed and retrying with their reason, stalled, stopped, and the outages of the cluster and
the tracking server with their recoveries; training steps only feed the live table), and as its
``on_update`` the sweep's first line and the estimated time left once cells have finished
(:func:`eta_s`, shared with the live view). Everything it prints comes in the events: it reads
nothing back from the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from gppo.score_format import pct, quantize
from gppo.store.state import State
from gppo.store.uri import redact
from gppo.sweep.running.attempts import Event

if TYPE_CHECKING:
    from gppo.sweep.result import LaunchResult


def stamp(now: float | None = None) -> str:
    """``2026-12-01 08:20:13Z`` (UTC, second resolution)."""
    moment = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def fmt_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def eta_s(
    durations: list[float], pending: int, running_elapsed: list[float], slots: int
) -> float | None:
    """Seconds left: the mean duration of the cells finished so far times the work left.

    Work left = ``pending`` cells of a full mean duration each plus, for each running cell, the
    part of a mean duration it has not run yet; spread over ``slots`` concurrent jobs. None
    before the first cell has finished.
    """
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    work = pending * mean + sum(max(0.0, mean - e) for e in running_elapsed)
    return work / max(1, slots)


def _pct(score: float) -> str:
    """A fraction in percent, one decimal, rounded as Table 1 rounds (half up)."""
    return str(quantize(pct(score), 1))


class LaunchLog:
    """Prints launch events as timestamped lines.

    Args:
        emit: prints one line (``print``; above a rich Live panel: ``live.console.print``).
        slots: concurrent jobs (for the time-left estimate).
        now: the clock (tests).
    """

    def __init__(
        self, emit: Callable[[str], None], *, slots: int, now: Callable[[], float] = time.time
    ) -> None:
        self.emit, self.slots, self.now = emit, slots, now
        self.durations: list[float] = []
        self.t0 = now()
        self.k: dict[str, int] = {}  # each cell's eval k (for its avg@k), once the sweep is known
        self._eta_at = 0  # finished cells when the last estimate was printed

    def line(self, text: str) -> None:
        """Print ``text`` stamped, any URI's password in it redacted (a failure quoting a URI)."""
        self.emit(f"{stamp(self.now())}  {redact(text)}")

    def __call__(self, result: LaunchResult) -> None:
        """The launcher's ``on_update``: the sweep's first line, then the time left."""
        if not self.k:
            self.k = {cid: st.cell.eval_k for cid, st in result.cells.items()}
            skipped = [c for c in result.cells.values() if c.state is State.DONE]
            self.line(
                f"sweep {result.sweep_id}: {len(result.cells)} cells, "
                f"{len(skipped)} already finished, {self.slots} at a time"
            )
        self._eta(result)

    def event(self, ev: Event) -> None:
        """The launcher's ``on_event``: one line per event (training steps excepted)."""
        if ev.kind == "step":
            return
        if ev.kind == "attached":
            self.line(f"{'re-attached':<11} {ev.cell}  attempt {ev.attempt}  job {ev.job}")
        elif ev.kind == "finished":
            if ev.took_s is not None:
                self.durations.append(ev.took_s)
            k = self.k.get(ev.cell, 0)
            avg = f"avg@{k} {_pct(ev.score)}%" if ev.score is not None else f"avg@{k} -"
            span = f" in {fmt_duration(ev.took_s)}" if ev.took_s is not None else ""
            self.line(f"{'finished':<11} {ev.cell}  {avg}{span}")
        else:
            self.line(ev.text())

    def eta(self, result: LaunchResult) -> float | None:
        """Seconds left (None before the first cell of this launch has finished)."""
        return launch_eta(result, self.durations, self.slots, self.now())

    def _eta(self, result: LaunchResult) -> None:
        """A progress line with the time left, once per cell finished (when the estimate moves)."""
        if len(self.durations) == self._eta_at:
            return
        left = self.eta(result)
        if left is None:
            return
        self._eta_at = len(self.durations)
        c = state_counts(result)
        self.line(
            f"{'progress':<11} {c['done']}/{len(result.cells)} done, {c['running']} running, "
            f"{c['pending']} pending, {c['failed']} failed; about {fmt_duration(left)} left"
        )

    def summary(self, result: LaunchResult) -> str:
        """The last line: counts, wall time, and what to do next."""
        c = state_counts(result)
        text = (
            f"sweep {result.sweep_id}: {c['done']}/{len(result.cells)} done, {c['failed']} failed"
            + (f", {c['stopped']} stopped" if c["stopped"] else "")
            + f" in {fmt_duration(self.now() - self.t0)}"
            + _idle_text(getattr(result, "idle", {}))
            + (", interrupted" if result.interrupted else "")
            + (" (jobs left running: relaunch to re-attach)" if result.detached else "")
        )
        return text


def _idle_text(idle: dict[str, str]) -> str:
    """`` (30 seeds not needed by the adaptive rounds; 3 not run: their row stopped on a failed
    seed)``; empty without adaptive seeds."""
    unneeded = sum(why == "unneeded" for why in idle.values())
    failed = len(idle) - unneeded
    seeds = f"{unneeded} seed{'s' * (unneeded != 1)}"
    parts = [f"{seeds} not needed by the adaptive rounds"] if unneeded else []
    parts += [f"{failed} not run: their row stopped on a failed seed"] if failed else []
    return f" ({'; '.join(parts)})" if parts else ""


def state_counts(result: LaunchResult) -> dict[str, int]:
    """Cells per displayed state: pending (with those waiting for a retry; not the cells the
    adaptive rounds have not asked for), running (with those ending), done, failed, stopped."""
    held: set[str] = getattr(result, "held", set())
    cells = [c for cid, c in result.cells.items() if cid not in held]

    def n(*states: State) -> int:
        return sum(1 for c in cells if c.state in states)

    return {
        "pending": n(State.PENDING, State.WAITING),
        "running": n(State.RUNNING, State.ENDING),
        "done": n(State.DONE),
        "failed": n(State.FAILED),
        "stopped": n(State.STOPPED),
    }


def launch_eta(
    result: LaunchResult, durations: list[float], slots: int, now: float
) -> float | None:
    """:func:`eta_s` of a launch in progress (None until a cell has finished in this launch)."""

    c = state_counts(result)
    running = [
        now - st.current.submitted_at
        for st in result.cells.values()
        if st.state is State.RUNNING and st.current is not None
    ]
    if not (c["pending"] or running):
        return None
    return eta_s(durations, c["pending"], running, slots)
