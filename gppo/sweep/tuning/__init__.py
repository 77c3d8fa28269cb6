"""Tuning with Optuna: ``gppo-sweep tune SPEC`` over trust-region radii and the design space.

Path of a trial: tuning spec (:mod:`.spec`) → Optuna ask → :func:`.space.suggest` → a one-cell
grid spec → :func:`gppo.grid.expand` → the backend's job, submitted by the sweep's
:class:`~gppo.sweep.dispatcher.Dispatcher` (:mod:`.jobs`) → values read back from MLflow
(:mod:`.readback`) → Optuna report/prune/tell (:mod:`.runner`). Crash safety: :mod:`.recovery`.
Report (best trials, plots, best grid spec): :mod:`.report`.
"""

from gppo.sweep.tuning.report import Report, write_report
from gppo.sweep.tuning.runner import TuneError, Tuner, run_tuning
from gppo.sweep.tuning.spec import TuneSpec, TuneSpecError, load_tune_spec, parse_tune_spec
from gppo.sweep.tuning.study import open_study, report_dir, storage_url

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
