"""A launch as a log: one timestamped line per event when stdout is not a terminal.

``gppo-sweep launch > log.txt`` (CI, ``nohup``) must not receive fragments of the live table.
:class:`LaunchLog` is an ``on_update`` observer of :class:`gppo.sweep.launch.Launcher`: it diffs
the cells' states between two updates and prints what changed (submitted, running, finished
with its avg@k, failed with its reason, retried, stopped), plus the estimated time left once
cells have finished (:func:`eta_s`, shared with the live view).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gppo import metrics as M
from gppo.scores import pct, quantize
from gppo.store.state import State


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


def first_line_of_failure(tags: dict[str, str]) -> str:
    """The reason of a failed run: the failure tag's first line and the log's last error line
    (the last line that names an error or exception, else the last line: a trainer's final
    lines are often warnings printed while it shuts down)."""
    text = tags.get(M.TAG_FAILURE, "").strip()
    if not text:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    why, tail = lines[0], lines[1:]
    if not tail:
        return why
    errors = [ln for ln in tail if _ERROR_LINE.search(ln)]
    return f"{why}: {(errors or tail)[-1][:200]}"


#: a log line that reports the failure itself (``ValueError: ...``, ``Traceback``, ``ERROR``)
_ERROR_LINE = re.compile(r"\b\w*(Error|Exception)\b|\bTraceback\b|\bERROR\b|\bFatal\b")


@dataclass
class _Seen:
    state: str
    attempt: int
    job: str | None
    run_id: str | None
    started: float | None


class LaunchLog:
    """Prints launch events as lines; call :meth:`__call__` with each LaunchResult update.

    Args:
        emit: prints one line (``print``; above a rich Live panel: ``live.console.print``).
        slots: concurrent jobs (for the time-left estimate).
        run_info: ``run_id -> (metrics, tags)`` of a cell's run (final avg@k, failure reason);
            None prints events without them.
        now: the clock (tests).
    """

    def __init__(
        self,
        emit: Callable[[str], None],
        *,
        slots: int,
        run_info: Callable[[str], tuple[dict[str, float], dict[str, str]]] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.emit, self.slots, self.run_info, self.now = emit, slots, run_info, now
        self.seen: dict[str, _Seen] = {}
        self.durations: list[float] = []
        self.t0 = now()
        self._eta_at = 0  # finished cells when the last estimate was printed

    def line(self, text: str) -> None:
        self.emit(f"{stamp(self.now())}  {text}")

    def _info(self, run_id: str | None) -> tuple[dict[str, float], dict[str, str]]:
        if run_id is None or self.run_info is None:
            return {}, {}
        try:
            return self.run_info(run_id)
        except Exception:  # a log line must never stop the launch
            return {}, {}

    def __call__(self, result: Any) -> None:
        first = not self.seen
        if first:
            skipped = [c for c in result.cells.values() if c.state is State.DONE]
            self.line(
                f"sweep {result.sweep_id}: {len(result.cells)} cells, "
                f"{len(skipped)} already finished, {self.slots} at a time"
            )
        for cid, st in result.cells.items():
            att = st.current
            prev = self.seen.get(cid)
            job = att.status if att is not None else None
            now_seen = _Seen(
                st.state,
                st.attempt,
                job,
                att.run_id if att is not None else (prev.run_id if prev else None),
                att.submitted_at if att is not None else (prev.started if prev else None),
            )
            self.seen[cid] = now_seen
            if prev is None and st.state is State.DONE:
                continue
            if st.state is State.RUNNING and att is not None:
                if prev is None or prev.attempt != st.attempt or prev.state is not State.RUNNING:
                    # at the first update, a job older than this log was found running
                    fresh = prev is not None or att.submitted_at >= self.t0 - 1.0
                    verb = "submitted" if fresh else "re-attached"
                    self.line(f"{verb:<11} {cid}  attempt {st.attempt}  job {att.submission_id}")
                if job == "RUNNING" and (prev is None or prev.job != "RUNNING"):
                    self.line(f"{'running':<11} {cid}  attempt {st.attempt}")
                continue
            if prev is not None and prev.state == st.state:
                continue
            self._ended(cid, st, now_seen)
        self._eta(result)

    def _ended(self, cid: str, st: Any, seen: _Seen) -> None:
        took = self.now() - seen.started if seen.started else None
        span = f" in {fmt_duration(took)}" if took is not None else ""
        metrics, tags = self._info(seen.run_id) if st.state is not State.PENDING else ({}, {})
        if st.state is State.DONE:
            if took is not None:
                self.durations.append(took)
            k = st.cell.eval_k
            score = metrics.get(M.eval_domain_metric(k))
            avg = f"avg@{k} {_pct(score)}%" if score is not None else f"avg@{k} -"
            self.line(f"{'finished':<11} {cid}  {avg}{span}")
        elif st.state is State.WAITING:
            why = first_line_of_failure(tags) or "job failed"
            self.line(f"{'retrying':<11} {cid}  {st.note}: {why}")
        elif st.state is State.FAILED:
            why = first_line_of_failure(tags) or st.note
            self.line(f"{'failed':<11} {cid}  {st.note}: {why}")
        elif st.state is State.STOPPED:
            self.line(f"{'stopped':<11} {cid}  {st.note}")

    def eta(self, result: Any) -> float | None:
        """Seconds left (None before the first cell of this launch has finished)."""
        return launch_eta(result, self.durations, self.slots, self.now())

    def _eta(self, result: Any) -> None:
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

    def summary(self, result: Any) -> str:
        """The last line: counts, wall time, and what to do next."""
        c = state_counts(result)
        text = (
            f"sweep {result.sweep_id}: {c['done']}/{len(result.cells)} done, {c['failed']} failed"
            + (f", {c['stopped']} stopped" if c["stopped"] else "")
            + f" in {fmt_duration(self.now() - self.t0)}"
            + (", interrupted" if result.interrupted else "")
            + (" (jobs left running: relaunch to re-attach)" if result.detached else "")
        )
        return text


def state_counts(result: Any) -> dict[str, int]:
    """Cells per displayed state: pending (with those waiting for a retry), running (with those
    ending), done, failed, stopped."""
    cells = list(result.cells.values())

    def n(*states: State) -> int:
        return sum(1 for c in cells if c.state in states)

    return {
        "pending": n(State.PENDING, State.WAITING),
        "running": n(State.RUNNING, State.ENDING),
        "done": n(State.DONE),
        "failed": n(State.FAILED),
        "stopped": n(State.STOPPED),
    }


def launch_eta(result: Any, durations: list[float], slots: int, now: float) -> float | None:
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


def run_info_from(uri: str | None) -> Callable[[str], tuple[dict[str, float], dict[str, str]]]:
    """A ``run_info`` for :class:`LaunchLog` reading runs from the store at ``uri``.

    The store is opened on the first read (a finished cell), never before: a launch refused
    before dispatch (busy, guard) must not create or touch the store.
    """
    from gppo.store.tracking import Tracking

    opened: list[Tracking] = []

    def info(run_id: str) -> tuple[dict[str, float], dict[str, str]]:
        if not opened:
            opened.append(Tracking(uri))
        run = opened[0].get_run(run_id)
        return dict(run.data.metrics), dict(run.data.tags)

    return info
