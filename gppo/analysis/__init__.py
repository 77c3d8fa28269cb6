"""Results of a sweep: collect MLflow runs into a tidy table; Table 1 (md/LaTeX/HTML/CSV); figures.

The folders, by concern (the statistics they use are :mod:`gppo.stats`, one layer down):

- ``data/``: ``collect`` (MLflow -> tidy), ``tidy`` (the tidy schema, cell labels, CSV reader),
  ``bases`` (each axis point's base-model rows);
- ``tables/``: ``table1`` (Table 1's model built: displayed numbers, ranks, footnotes) and
  ``table1_model`` (its types), ``render`` (md/LaTeX/HTML/CSV/terminal), ``aggregate`` (Mean/IQM
  and P(improvement) over benchmarks, rliable's view), ``axis_tables`` (a sweep with axes: Table
  1 per point, rank stability, each cell at its best point), ``adaptive_stops`` (why each row
  stopped under adaptive seeds), ``cost_column`` (Table 1's cost), ``exploration_contrasts``
  (the exploration study's contrasts);
- ``figures/``: ``paper_figures`` (Figure 1 geometry, Figure 2 dynamics), ``axis_figure`` (the
  axis-response figure);
- ``page/``: ``report_page`` (``report.html``, one self-contained page) and its template;
- ``vocabulary`` (row order, display names, colours: shared by tables, figures and the page);
  ``report_writer`` (write everything, attach to the sweep's parent run) and
  ``axis_report_writer`` (its part for a sweep with axes).

The commands (``gppo-sweep report`` / ``regions``) live in :mod:`gppo.cli.report`.
"""

from gppo.registry import lazy_exports

#: public name -> the module that defines it (imported on first use: the CLI imports
#: ``gppo.cli.report`` at start-up, and MLflow/pandas must not slow down ``--help``)
_EXPORTS = {
    "Collected": "data.collect",
    "collect": "data.collect",
    "Report": "report_writer",
    "write_report": "report_writer",
    "after_sweep": "report_writer",
    "write_report_from_csv": "report_writer",
    "aggregate_frame": "tables.aggregate",
    "write_aggregate": "tables.aggregate",
    "Table1": "tables.table1",
    "build_table1": "tables.table1",
    "ReportInputError": "data.tidy",
    "read_scores_csv": "data.tidy",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
