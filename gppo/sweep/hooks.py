"""Hooks the launcher calls when a sweep completes.

:func:`after_sweep` runs once when a launch ends with every cell finished. It is called inside
``try/except`` by :func:`gppo.sweep.launch.run_after_sweep_hook`, so a report that cannot be built
never fails a launch whose cells all finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: where ``launch`` writes a finished sweep's report, relative to the working directory
REPORTS_DIR = Path("reports")


def report_dir(sweep_id: str) -> Path:
    return REPORTS_DIR / sweep_id


def after_sweep(plan: Any, *, tracking_uri: str, experiment_id: str) -> Any:
    """Write the sweep's Table 1 and figures to ``reports/<sweep id>/`` and attach them to its
    parent MLflow run; returns the :class:`gppo.analysis.report.Report`."""
    from gppo.analysis.report import target_of, write_report_for_spec

    return write_report_for_spec(target_of(plan, tracking_uri), report_dir(plan.sweep_id))
