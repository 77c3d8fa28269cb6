"""Live progress of a study: trials done, running, pruned, failed, best value so far.

The display is the sweep's (:class:`gppo.sweep.monitor.terminal.LiveLines`): timestamped event lines, a
live panel under them on a terminal only, and off a terminal a one-line summary at the end.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from optuna.trial import TrialState
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from gppo.sweep.monitor.launch_log import fmt_duration
from gppo.sweep.monitor.terminal import LiveLines
from gppo.sweep.tuning.attrs import CONFIG

#: the :class:`gppo.sweep.tuning.runner.Tuner` being shown or recovered (not imported: the runner
#: imports this module)
Tuner = Any


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
    """Progress display of one study; ``console=None`` prints nothing (library use, tests)."""

    def __init__(self, console: Console | None) -> None:
        self.lines = LiveLines(console)
        self._t0 = time.monotonic()

    def render(self, tuner: Tuner) -> Group:
        s = summary(tuner.study)
        c, best = s["counts"], s["best"]
        line = Text.assemble(
            (f"study {tuner.spec.study_name}  ", "bold"),
            f"done {c['COMPLETE'] + c['PRUNED']}/{tuner.spec.tune.n_trials} "
            f"(complete {c['COMPLETE']}, pruned {c['PRUNED']})  ",
            f"running {len(tuner.active)}  failed {c['FAIL']}  ",
            f"{time.monotonic() - self._t0:.0f}s",
        )
        best_line = Text(
            f"best so far: {best.value:.4f} (trial {best.number}: "
            f"{best.user_attrs.get(CONFIG, best.params)})"
            if best is not None
            else "best so far: -"
        )
        table = Table(box=None, show_header=True, header_style="dim")
        for col in ("trial", "config", "step", "last value"):
            table.add_column(col)
        for a in tuner.active.values():
            last = a.reported.get(a.last_step)
            step, value = str(max(a.last_step, 0)), "-" if last is None else f"{last:.4f}"
            table.add_row(str(a.number), a.label, step, value)
        return Group(line, best_line, *([table] if tuner.active else []))

    def summary_line(self, tuner: Tuner) -> str:
        """``study S: 12/12 done (complete 10, pruned 2), 0 failed, best 0.4375 (trial 7) in 3m05s``."""
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
        """The live panel while the study runs; off a terminal, the summary line at the end."""
        console = self.lines.console
        try:
            with self.lines.showing(lambda: self.render(tuner)):
                yield
        finally:
            if console is not None and not console.is_terminal:
                self.event(self.summary_line(tuner))

    def update(self, tuner: Tuner) -> None:
        self.lines.refresh()

    def event(self, message: str) -> None:
        """One timestamped line (above the live panel on a terminal)."""
        self.lines.line(message)
