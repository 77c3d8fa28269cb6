"""Rich rendering of a launch in progress and of ``status`` tables."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gppo.store.state import State

if TYPE_CHECKING:
    from rich.console import RenderableType

    from gppo.sweep.monitor.commands import CellStatus
    from gppo.sweep.result import LaunchResult
    from gppo.sweep.running.attempts import Event

log = logging.getLogger(__name__)


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def launch_view(result: LaunchResult, max_rows: int = 20, eta_s: float | None = None) -> Group:
    """Counts of pending/running/done/failed cells, the time left (``eta_s``, once known) and
    one row per running cell."""
    from gppo.sweep.monitor.launch_log import fmt_duration, state_counts

    cells = result.cells.values()
    counts = state_counts(result)
    head = Text.assemble(
        (f"sweep {result.sweep_id}  ", "bold"),
        *[
            (f"{k} {v}  ", style)
            for (k, v), style in zip(
                counts.items(), ["dim", "cyan", "green", "red", "yellow"], strict=True
            )
        ],
        (f"about {fmt_duration(eta_s)} left" if eta_s is not None else "", "bold"),
    )
    table = Table(box=None, pad_edge=False)
    for col in ("cell", "attempt", "job", "step", "train score", "running for"):
        table.add_column(col)
    now = time.time()
    running = [c for c in cells if c.state is State.RUNNING and c.current is not None]
    for c in running[:max_rows]:
        assert c.current is not None  # kept by `running`
        table.add_row(
            c.cell.id,
            str(c.attempt),
            c.current.status,
            "-" if c.step is None else str(c.step),
            _fmt(c.score),
            f"{now - c.current.submitted_at:.0f}s",
        )
    if len(running) > max_rows:
        table.add_row(f"... {len(running) - max_rows} more", "", "", "", "", "")
    return Group(head, table)


def status_table(rows: Sequence[CellStatus]) -> Table:
    table = Table(title="cells")
    notes = any(getattr(r, "last_failure", None) for r in rows)
    cols = ("cell", "state", "attempt", "step", "train score", "eval", "run id")
    for col in (*cols, "last failure") if notes else cols:
        table.add_column(col)
    styles = {
        State.DONE: "green",
        State.RUNNING: "cyan",
        State.FAILED: "red",
        State.STOPPED: "yellow",
        State.INTERRUPTED: "yellow",
    }
    for r in rows:
        table.add_row(
            r.cell,
            Text(getattr(r, "shown_state", r.state), style=styles.get(r.state, "")),
            "-" if r.attempt is None else str(r.attempt),
            "-" if r.step is None else str(r.step),
            _fmt(r.score),
            _fmt(r.eval_score),
            r.run_id or "-",
            *([r.last_failure or ""] if notes else []),
        )
    return table


class LaunchOutput:
    """What ``gppo-sweep launch`` prints while it runs.

    On a terminal: a rich Live panel (:func:`launch_view`, with the time left) and the events
    printed above it. Otherwise (a file, a pipe, CI): no panel at all, only the timestamped event
    lines of :class:`gppo.sweep.monitor.launch_log.LaunchLog`. Use as a context manager around
    ``Launcher.run()`` with :meth:`update` as the launcher's ``on_update`` and :meth:`event` as
    its ``on_event``.
    """

    def __init__(self, console: Any, *, slots: int) -> None:
        from rich.live import Live

        from gppo.sweep.monitor.launch_log import LaunchLog

        self.console = console
        self.live = Live(console=console, auto_refresh=False) if console.is_terminal else None
        emit = (
            (lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
            if self.live is not None
            else (lambda line: console.out(line, highlight=False))
        )
        self.log = LaunchLog(emit, slots=slots)
        self.broken = False

    def update(self, result: LaunchResult) -> None:
        """The launcher's ``on_update``; a display error is reported once, never raised (it
        would end the launch without stopping its jobs)."""
        try:
            self.log(result)
            if self.live is not None:
                self.live.update(launch_view(result, eta_s=self.log.eta(result)), refresh=True)
        except Exception as exc:
            if not self.broken:
                self.broken = True
                log.warning("progress display failed: %s: %s", type(exc).__name__, exc)

    def event(self, ev: Event) -> None:
        """The launcher's ``on_event``: one line per event, above the live panel."""
        try:
            self.log.event(ev)
        except Exception as exc:
            if not self.broken:
                self.broken = True
                log.warning("progress display failed: %s: %s", type(exc).__name__, exc)

    def summary(self, result: LaunchResult) -> None:
        self.log.line(self.log.summary(result))

    def __enter__(self) -> LaunchOutput:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)


class LiveLines:
    """Timestamped event lines with, on a terminal, a live panel under them (rich ``Live``).

    Off a terminal (a file, a pipe, CI) only the lines are printed, never the panel, so a log
    receives no fragments of a live table. ``console=None`` prints nothing (library use, tests).
    Used by the tuner's progress (:class:`gppo.sweep.tuning.study_progress.Progress`).
    """

    def __init__(self, console: Any | None) -> None:
        self.console = console
        self._live: Any = None
        self._render: Any = None

    def line(self, text: str) -> None:
        """One timestamped line (above the live panel on a terminal)."""
        from gppo.sweep.monitor.launch_log import stamp

        if self.console is not None:
            self.console.print(f"{stamp()}  {text}", markup=False, highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def showing(self, render: Callable[[], RenderableType]) -> Iterator[None]:
        """Show ``render()`` live for the duration (on a terminal); :meth:`refresh` redraws."""
        if self.console is None or not self.console.is_terminal:
            yield
            return
        from rich.live import Live

        with Live(render(), console=self.console, refresh_per_second=2) as live:
            self._live, self._render = live, render
            try:
                yield
            finally:
                live.update(render())
                self._live = None

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
