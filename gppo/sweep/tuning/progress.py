"""Live progress of a study with rich: trials done, running, pruned, failed, best value so far."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from gppo.sweep.tuning.runner import Tuner


def summary(study: Any) -> dict[str, Any]:
    """Counts by state and the best trial so far (``best`` is None before the first COMPLETE)."""
    counts = {s.name: 0 for s in TrialState}
    best = None
    for ft in study.get_trials(deepcopy=False):
        counts[ft.state.name] += 1
        ok = ft.state == TrialState.COMPLETE and ft.value is not None
        if ok and (best is None or ft.value > best.value):
            best = ft
    return {"counts": counts, "best": best}


class Progress:
    """Progress display; ``console=None`` prints nothing (library use, tests).

    On a terminal, a live panel with the events printed above it; otherwise (a file, a pipe, CI)
    only the timestamped event lines and a one-line summary at the end, never the panel."""

    def __init__(self, console: Console | None) -> None:
        self.console = console
        self._live: Live | None = None
        self._events: list[str] = []
        self._t0 = time.monotonic()

    def render(self, tuner: Tuner) -> Group:
        s = summary(tuner.study)
        c = s["counts"]
        n = tuner.spec.tune.n_trials
        done = c["COMPLETE"] + c["PRUNED"]
        line = Text.assemble(
            (f"study {tuner.spec.study_name}  ", "bold"),
            f"done {done}/{n} (complete {c['COMPLETE']}, pruned {c['PRUNED']})  ",
            f"running {len(tuner.active)}  failed {c['FAIL']}  ",
            f"{time.monotonic() - self._t0:.0f}s",
        )
        best = s["best"]
        best_line = Text(
            f"best so far: {best.value:.4f} (trial {best.number}: "
            f"{best.user_attrs.get('gppo.config', best.params)})"
            if best is not None
            else "best so far: -"
        )
        table = Table(box=None, show_header=True, header_style="dim")
        for col in ("trial", "config", "step", "last value"):
            table.add_column(col)
        for a in tuner.active.values():
            last = a.reported.get(a.last_step)
            table.add_row(
                str(a.number),
                a.label,
                str(max(a.last_step, 0)),
                "-" if last is None else f"{last:.4f}",
            )
        parts: list[Any] = [line, best_line]
        if tuner.active:
            parts.append(table)
        return Group(*parts)

    def summary_line(self, tuner: Tuner) -> str:
        """``study S: 12/12 done (complete 10, pruned 2), 0 failed, best 0.4375 (trial 7) in 3m05s``."""
        from gppo.sweep.progress_log import fmt_duration

        s = summary(tuner.study)
        c, best = s["counts"], s["best"]
        return (
            f"study {tuner.spec.study_name}: {c['COMPLETE'] + c['PRUNED']}/"
            f"{tuner.spec.tune.n_trials} done (complete {c['COMPLETE']}, pruned {c['PRUNED']}), "
            f"{c['FAIL']} failed, best "
            + (f"{best.value:.4f} (trial {best.number})" if best is not None else "-")
            + f" in {fmt_duration(time.monotonic() - self._t0)}"
        )

    @contextlib.contextmanager
    def live(self, tuner: Tuner) -> Iterator[None]:
        if self.console is None:
            yield
            return
        if not self.console.is_terminal:
            try:
                yield
            finally:
                self.event(self.summary_line(tuner))
            return
        with Live(self.render(tuner), console=self.console, refresh_per_second=2) as live:
            self._live = live
            try:
                yield
            finally:
                live.update(self.render(tuner))
                self._live = None

    def update(self, tuner: Tuner) -> None:
        if self._live is not None:
            self._live.update(self.render(tuner))

    def event(self, message: str) -> None:
        """One timestamped line (above the live panel on a terminal)."""
        from gppo.sweep.progress_log import stamp

        self._events.append(message)
        if self.console is not None:
            self.console.print(
                f"{stamp()}  {message}", markup=False, highlight=False, soft_wrap=True
            )
