"""``gppo-sweep tune > file``: timestamped event lines and a summary line, never the live panel."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import optuna
from rich.console import Console

from gppo.sweep.tuning.study_progress import Progress

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ  "


def test_progress_to_a_file_prints_events_and_a_summary():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")  # a real (in-memory) study
    for value in (0.25, 0.5):
        trial = study.ask()
        study.tell(trial, value)
    pruned = study.ask()
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    tuner = SimpleNamespace(
        study=study,
        spec=SimpleNamespace(study_name="tp-study", tune=SimpleNamespace(n_trials=4)),
        active={},
    )
    out = io.StringIO()
    console = Console(file=out, width=100)  # a file: not a terminal
    assert not console.is_terminal
    progress = Progress(console)
    with progress.live(tuner):
        progress.update(tuner)
        progress.event("trial 0 complete: 0.2500")
        progress.event("trial 2 pruned at step 3")
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue() and "best so far" not in out.getvalue()  # no panel
    assert [re.sub(STAMP, "", ln) for ln in lines[:2]] == [
        "trial 0 complete: 0.2500",
        "trial 2 pruned at step 3",
    ]
    assert all(re.match(STAMP, ln) for ln in lines)
    assert re.match(
        STAMP + r"study tp-study: 3/4 done \(complete 2, pruned 1\), 0 failed, best 0\.5000 "
        r"\(trial 1\) in \d+s$",
        lines[-1],
    )
