"""``gppo-sweep data prepare``: a user's dataset converted into the rows a backend's cells read,
through the backend's hook (:meth:`gppo.backends.base.Backend.prepare_data`). The backend is a
spec's (``--backend``, default a spec's default backend); one that reads no prepared data says so
in one line and names those that do. Wired into the CLI by :mod:`gppo.cli.app`."""

from __future__ import annotations

from pathlib import Path

import typer

from gppo.backends.base import BACKENDS, get_backend
from gppo.cell import DEFAULT_BACKEND
from gppo.cli.exit_codes import fail
from gppo.errors import GppoError

data_app = typer.Typer(help="Prepare datasets for a backend's cells.", no_args_is_help=True)


@data_app.callback()
def _data() -> None:
    """Prepare datasets for a backend's cells (keeps ``prepare`` a sub-command)."""


@data_app.command("prepare")
def data_prepare(
    input_path: Path = typer.Argument(..., help="The user's file: .jsonl, .json or .parquet."),
    output_path: Path = typer.Argument(
        ..., help="The file to write (the backend's format, e.g. parquet)."
    ),
    source: str = typer.Option(
        ...,
        "--source",
        "-s",
        help="data_source name: selects the scorer and names the metric (an unknown name lists "
        "the backend's).",
    ),
    backend: str = typer.Option(
        DEFAULT_BACKEND,
        "--backend",
        "-b",
        help=f"The backend whose cells read the file: {' | '.join(BACKENDS.names())}.",
    ),
    split: str = typer.Option("train", help="Recorded in extra_info.split (train | test)."),
    skip_invalid: bool = typer.Option(
        False,
        "--skip-invalid",
        help="Write the convertible rows and list the others in OUTPUT.rejects.jsonl.",
    ),
) -> None:
    """Convert a JSONL/Parquet file into the one file of the backend's data for benchmark SOURCE
    (run it once per benchmark)."""
    try:
        report = get_backend(backend).prepare_data(
            input_path, output_path, source, split=split, skip_invalid=skip_invalid
        )
    except GppoError as exc:
        raise fail(exc) from None
    typer.echo(f"wrote {report.written} rows ({source}) to {report.output}")
    if report.rejected:
        typer.echo(
            f"skipped {len(report.rejected)} invalid rows, listed with reasons in "
            f"{report.rejects_file}",
            err=True,
        )
