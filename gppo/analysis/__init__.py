"""Results of a sweep: collect MLflow runs into a tidy table; Table 1 (md/LaTeX/HTML/CSV); figures.

Modules: ``tidy`` (tidy schema, cell labels, CSV reader), ``collect`` (MLflow -> tidy),
``table`` (Table 1 model: displayed numbers, ranks, footnotes), ``render`` (formats),
``figures`` (Figure 1 geometry, Figure 2 dynamics), ``report`` (write everything, attach to the
sweep's parent run), ``commands`` (``gppo-sweep report`` / ``regions``).
"""

from gppo.analysis.collect import Collected, collect
from gppo.analysis.report import (
    Report,
    SweepTarget,
    resolve_spec,
    write_report,
    write_report_for_spec,
    write_report_from_csv,
)
from gppo.analysis.table import Table1, build_table1
from gppo.analysis.tidy import ReportInputError, read_scores_csv

__all__ = [
    "Collected",
    "Report",
    "ReportInputError",
    "SweepTarget",
    "Table1",
    "build_table1",
    "collect",
    "read_scores_csv",
    "resolve_spec",
    "write_report",
    "write_report_for_spec",
    "write_report_from_csv",
]
