"""Results of a sweep: collect MLflow runs into a tidy table; Table 1 (md/LaTeX/HTML/CSV); figures.

Modules: ``tidy`` (tidy schema, cell labels, CSV reader), ``collect`` (MLflow -> tidy),
``table`` (Table 1 model: displayed numbers, ranks, footnotes; its statistics are
:mod:`gppo.stats`'), ``render`` (formats), ``aggregate`` (Mean/IQM and
P(improvement) over benchmarks, rliable's view), ``figures`` (Figure 1 geometry, Figure 2
dynamics), ``axes`` / ``axes_report`` / ``axis_figure`` (a sweep with axes: Table 1 per point,
rank stability, the axis-response figure), ``bases`` (each axis point's base-model rows),
``page`` (``report.html``, one self-contained page), ``report`` (write everything, attach to
the sweep's parent run). The commands (``gppo-sweep report`` /
``regions``) live in :mod:`gppo.cli.report`.
"""

from gppo.registry import lazy_exports

#: public name -> the module that defines it (imported on first use: the CLI imports
#: ``gppo.cli.report`` at start-up, and MLflow/pandas must not slow down ``--help``)
_EXPORTS = {
    "Collected": "collect",
    "collect": "collect",
    "Report": "report",
    "write_report": "report",
    "after_sweep": "report",
    "write_report_from_csv": "report",
    "aggregate_frame": "aggregate",
    "write_aggregate": "aggregate",
    "Table1": "table",
    "build_table1": "table",
    "ReportInputError": "tidy",
    "read_scores_csv": "tidy",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
