"""Tuning with Optuna: ``gppo-sweep tune SPEC`` over trust-region radii and the design space.

A thin layer over the sweep. Path of a trial: tuning spec (:mod:`.spec`, read with the grid
loader's errors) → Optuna ask → :func:`.space.suggest` → a one-cell grid spec → the grid loader
and :func:`gppo.grid.expand` (:mod:`.cells`) → the backend's job, submitted by the sweep's
:class:`~gppo.sweep.running.dispatcher.Dispatcher` in the study's sweep session (:mod:`.jobs`,
:func:`gppo.sweep.session.open_session`) → values read back from MLflow (:mod:`.readback`) →
Optuna report/prune/tell (:mod:`.runner`). Crash safety: :mod:`.recovery`, on the launcher's rule
for a run whose driver died (:func:`gppo.sweep.session.settle_orphan`). Progress: the sweep's
live lines (:mod:`.progress`). Report (best trials, plots, best grid spec): :mod:`.report`.
Optuna is used through its public API only.
"""

from gppo.sweep.tuning.runner import TuneError, Tuner, run_tuning
from gppo.sweep.tuning.spec import TuneSpec, TuneSpecError, load_tune_spec, parse_tune_spec
from gppo.sweep.tuning.study import open_study, report_dir, storage_url
from gppo.sweep.tuning.study_report import Report, write_report

__all__ = [
    "Report",
    "TuneError",
    "TuneSpec",
    "TuneSpecError",
    "Tuner",
    "load_tune_spec",
    "open_study",
    "parse_tune_spec",
    "report_dir",
    "run_tuning",
    "storage_url",
    "write_report",
]
