"""``gppo-sweep tune SPEC``: run or resume an Optuna study of a tuning spec (see gppo.sweep.tuning).

Exit codes: 0 done; 1 the study could not finish (too many failed trials) or ``--report`` found
no study; 2 malformed spec (one line ``FILE: field.path: message`` on stderr, nothing started);
130 interrupted (the tuner's running jobs are stopped and their trials marked FAIL).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from gppo.cli.args import OverridesArg, only_overrides
from gppo.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, fail


def tune(
    spec: Annotated[Path, typer.Argument(help="tuning spec (YAML)", show_default=False)],
    overrides: OverridesArg = None,
    report: Annotated[
        bool,
        typer.Option("--report", help="only write the report of the study so far; run nothing"),
    ] = False,
    n_trials: Annotated[
        int | None, typer.Option("--n-trials", min=1, help="override tune.n_trials")
    ] = None,
    n_parallel: Annotated[
        int | None, typer.Option("--n-parallel", min=1, help="override tune.n_parallel")
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage",
            help="Optuna storage URL (default: SQLite beside MLflow); its password from "
            "PGPASSWORD or ~/.pgpass, not the URL",
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option("--address", help="Ray Jobs API address (default: RAY_ADDRESS, else local)"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="report folder (default: tune-<study> beside the MLflow store)"),
    ] = None,
) -> None:
    """Tune radii, learning rate and the design space with Optuna; trials run as Ray jobs.

    Live progress while it runs; at the end (and with --report): the best trials, Optuna's plots (HTML + PNG) and the best configuration as a grid spec. Rerunning resumes the study.
    """
    from rich.console import Console

    from gppo.grid.overrides import attributed, resolve
    from gppo.sweep.tuning import load_tune_spec, report_dir, write_report
    from gppo.sweep.tuning.cells import check_spec
    from gppo.sweep.tuning.percell import cell_specs
    from gppo.sweep.tuning.spec import TUNE_FORBIDDEN, TUNE_ROOTS, with_overrides
    from gppo.sweep.tuning.study_report import write_cell_report

    ts = with_overrides(  # a malformed spec (TuneSpecError) ends as one line, exit 2
        load_tune_spec(spec, only_overrides(overrides)),  # an explicit option wins over one
        address=address,
        n_trials=n_trials,
        n_parallel=n_parallel,
        storage=storage,
    )
    with attributed(resolve(ts.overrides, ts.base, roots=TUNE_ROOTS, forbidden=TUNE_FORBIDDEN)):
        check_spec(ts)  # the grid base and the space's corners: an override's error names it
    console = Console()
    folder = out or report_dir(ts)
    specs = cell_specs(ts)
    studies = []
    for sub in specs:
        again = shlex.join([str(spec), *ts.overrides])  # the command that runs this study
        study = _stored_study(sub, again) if report else _run_study(sub, spec, console)
        write_report(sub, study, folder if len(specs) == 1 else folder / sub.study_name, console)
        studies.append((sub, study))
    if len(specs) > 1:
        write_cell_report(studies, folder, console)


def _stored_study(sub: Any, spec: str) -> Any:
    """The study of one (cell's) tuning spec as stored; none: one line, exit 1."""
    from gppo.store.uri import redact
    from gppo.sweep.tuning.study import load_study, storage_url

    study = load_study(sub)
    if study is None:
        raise fail(
            f"no study {sub.study_name!r} in {redact(storage_url(sub))}; "
            f"run `gppo-sweep tune {spec}` first",
            EXIT_FAILED,
        )
    return study


def _run_study(sub: Any, spec: Path, console: Any) -> Any:
    """Run or resume the study of one (cell's) tuning spec; its failures as one line each."""
    from gppo.errors import StoreNotShared, TuneError
    from gppo.store.uri import redact
    from gppo.sweep.tuning import run_tuning
    from gppo.sweep.tuning.study import make_storage, storage_url
    from gppo.sweep.tuning.study_progress import Progress

    url = storage_url(sub)
    if not url.startswith("sqlite"):  # a server's refused login: one line, nothing started
        make_storage(url).engine.dispose()  # (a SQLite file has no login, and opening it writes)
    console.print(f"study {sub.study_name} on {redact(url)}", markup=False,
                  highlight=False)  # fmt: skip
    try:
        return run_tuning(sub, progress=Progress(console))
    except KeyboardInterrupt:
        raise fail(
            "interrupted: running trials were stopped and marked FAIL", EXIT_INTERRUPTED
        ) from None
    except TuneError as exc:
        raise fail(f"tune failed: {exc}", EXIT_FAILED) from None
    except StoreNotShared as exc:  # before anything was written or submitted
        raise fail(f"{spec}: {exc}", exc.exit_code) from None
