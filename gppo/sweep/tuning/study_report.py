"""The study's report: best trials, Optuna's plots (HTML + PNG) and the best config as a grid spec.

Files written to the report folder:

* ``best_trials.md``: the table of the best COMPLETE trials (also printed);
* ``optimization_history.html|png``, ``param_importances.html|png``: from
  ``optuna.visualization`` (plotly; the HTML files share one ``plotly.min.js`` in the folder, so
  they open offline) and ``optuna.visualization.matplotlib``. Parameter importances need at least
  two COMPLETE trials and one searched parameter that varies; otherwise that plot is skipped, and
  the reason is listed in ``notes``;
* ``best.yaml``: the best configuration as a grid spec with the base seeds, checked by the grid
  loader, ready for ``gppo-sweep launch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState
from rich.console import Console
from rich.table import Table

from gppo.grid import expand, spec_to_yaml
from gppo.grid.load import spec_from_yaml
from gppo.store.uri import redact, without_password
from gppo.sweep.tuning import attrs
from gppo.sweep.tuning.percell import cell_summary
from gppo.sweep.tuning.space import TrialConfig, best_axes_grid, best_spec, config_from_params
from gppo.sweep.tuning.spec import TuneSpec


@dataclass
class Report:
    """What :func:`write_report` produced."""

    folder: Path
    rows: list[dict[str, Any]]
    files: list[Path] = field(default_factory=list)
    best_spec: Path | None = None
    notes: list[str] = field(default_factory=list)


def best_rows(study: optuna.Study, top: int) -> list[dict[str, Any]]:
    """The ``top`` COMPLETE trials by value (highest first), ranked from 1."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    done.sort(key=lambda t: (-(t.value if t.value is not None else float("-inf")), t.number))
    return [
        {
            "rank": rank,
            "trial": t.number,
            "value": t.value,
            "config": t.user_attrs.get(attrs.CONFIG, ""),
            "cell": t.user_attrs.get(attrs.CELL_ID, ""),
            "params": dict(t.params),
            "run_id": t.user_attrs.get(attrs.RUN_ID, ""),
        }
        for rank, t in enumerate(done[:top], 1)
    ]


#: (header, row key) of the best-trials table and of the per-cell table
BEST_COLUMNS = [("rank", "rank"), ("trial", "trial"), ("value", "value"), ("config", "config"),
                ("cell", "cell"), ("MLflow run", "run_id")]  # fmt: skip
CELL_COLUMNS = [("study", "study"), ("complete", "complete"), ("default", "default"),
                ("best", "best"), ("gain", "gain"), ("best config", "best_config")]  # fmt: skip


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "-" if value is None else str(value)


def write_table(
    rows: list[dict[str, Any]],
    columns: list[tuple[str, str]],
    path: Path,
    title: str,
    console: Console | None,
) -> Path:
    """Write ``rows`` as a markdown table to ``path`` and print them as a rich table."""
    cells = [[_cell(r[key]) for _, key in columns] for r in rows]
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(redact("\n".join(lines) + "\n"))
    if console is not None:
        table = Table(title=title)
        for header, key in columns:
            numeric = rows and all(isinstance(r[key], (int, float)) for r in rows)
            table.add_column(header, justify="right" if numeric else "left")
        for row in cells:
            table.add_row(*row)
        console.print(table)
    return path


def _plot(name: str, study: optuna.Study, folder: Path) -> list[Path]:
    """``<name>.html`` (``optuna.visualization.plot_<name>``) and ``<name>.png`` (its
    matplotlib twin) in ``folder``."""
    import warnings

    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from optuna import visualization as vis
    from optuna.visualization import matplotlib as vis_mpl

    html, png = folder / f"{name}.html", folder / f"{name}.png"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna's "experimental" warnings on the mpl plots
        getattr(vis, f"plot_{name}")(study).write_html(str(html), include_plotlyjs="directory")
        ax = getattr(vis_mpl, f"plot_{name}")(study)
    figure = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
    figure.savefig(png, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return [html, png]


def write_report(
    spec: TuneSpec, study: optuna.Study, folder: Path, console: Console | None = None
) -> Report:
    """Write the report files into ``folder`` and print the table of best trials."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = best_rows(study, spec.tune.top)
    report = Report(folder, rows)
    title = f"best trials of study {spec.study_name}"
    report.files.append(write_table(rows, BEST_COLUMNS, folder / "best_trials.md", title, console))
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    varying = {
        k for t in complete for k in t.params if len({u.params.get(k) for u in complete}) > 1
    }
    importances = len(complete) >= 2 and varying
    plots = {  # plot: the note when it cannot be drawn yet, else None
        "optimization_history": None if complete else "no COMPLETE trial yet: no optimisation history",
        "param_importances": None if importances
        else "parameter importances need 2 COMPLETE trials and a parameter that varies",
    }  # fmt: skip
    for name, note in plots.items():
        try:
            report.files += [] if note else _plot(name, study, folder)
        except (ValueError, RuntimeError) as err:
            note = f"{name.replace('param_', 'parameter ').replace('_', ' ')} skipped: {err}"
        report.notes += [note] if note else []
    if rows:
        report.best_spec = write_best_spec(spec, rows[0], folder / "best.yaml")
        report.files += [report.best_spec, report.best_spec.with_name("best-axes.yaml")]
    else:
        report.notes.append("no COMPLETE trial: no best configuration")
    if console is not None:
        for f in report.files:
            console.print(f"wrote {f}", markup=False, highlight=False)
        for n in report.notes:
            console.print(f"note: {n}", markup=False, highlight=False)
    return report


def write_best_spec(spec: TuneSpec, row: dict[str, Any], path: Path) -> Path:
    """Write the best trial's configuration as a grid spec (validated by the grid loader)."""
    cfg = config_from_params(row["params"], spec.tune.space)
    grid = best_spec(spec, cfg)
    expand(grid, str(path))  # ready to launch, or raise here
    header = (
        f"# Best configuration of study {spec.study_name!r}: trial {row['trial']}, "
        f"value {row['value']:.6g}\n# {cfg.label}\n# Launch it with: gppo-sweep launch {path.name}\n"
    )
    # no password in a report file: the launch reads it from MLflow's variables or PGPASSWORD
    text = header + yaml.safe_dump(spec_to_yaml(grid), sort_keys=False)
    path.write_text(without_password(text))
    write_axes_spec(spec, cfg, path.with_name("best-axes.yaml"))
    return path


def write_axes_spec(spec: TuneSpec, cfg: TrialConfig, path: Path) -> Path:
    """``best-axes.yaml``: the best configuration with axes around it (learning rate and radius,
    :func:`~gppo.sweep.tuning.space.best_axes_grid`), checked by the grid loader."""
    data = best_axes_grid(spec, cfg)
    expand(spec_from_yaml(data, str(path)), str(path))
    header = (
        f"# The best configuration of study {spec.study_name!r} with axes around it\n"
        f"# Launch it with: gppo-sweep launch {path.name}\n"
    )
    path.write_text(without_password(header + yaml.safe_dump(data, sort_keys=False)))
    return path


def write_cell_report(
    studies: list[tuple[TuneSpec, optuna.Study]], folder: Path, console: Console | None
) -> Path:
    """``cells.md`` (and the same table printed): each cell study's default, best and gain."""
    title = "per-cell tuning: gain over the default configuration"
    path = write_table(cell_summary(studies), CELL_COLUMNS, folder / "cells.md", title, console)
    if console is not None:
        console.print(f"wrote {path}", markup=False, highlight=False)
    return path
