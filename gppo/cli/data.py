"""CLI for the verl backend: ``gppo-sweep data prepare`` (wire with
``app.add_typer(data_app, name="data")`` in gppo/cli.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from gppo.backends.verl.data import DataPrepError, prepare
from gppo.backends.verl.reward import SCORER_OF
from gppo.cli.errors import fail

data_app = typer.Typer(help="Prepare datasets for the verl backend.", no_args_is_help=True)


@data_app.callback()
def _data() -> None:
    """Prepare datasets for the verl backend (keeps ``prepare`` a sub-command)."""


@data_app.command("prepare")
def data_prepare(
    input_path: Path = typer.Argument(..., help="The user's file: .jsonl, .json or .parquet."),
    output_path: Path = typer.Argument(..., help="The verl parquet file to write."),
    source: str = typer.Option(
        ...,
        "--source",
        "-s",
        help=f"data_source name (selects the scorer and names the metric): {', '.join(sorted(SCORER_OF))}",
    ),
    split: str = typer.Option("train", help="Recorded in extra_info.split (train | test)."),
    skip_invalid: bool = typer.Option(
        False,
        "--skip-invalid",
        help="Write the convertible rows and list the others in OUTPUT.rejects.jsonl.",
    ),
) -> None:
    """Convert a JSONL/Parquet file into verl's RL parquet schema (one file per benchmark)."""
    try:
        report = prepare(input_path, output_path, source, split=split, skip_invalid=skip_invalid)
    except DataPrepError as exc:
        raise fail(exc) from None
    typer.echo(f"wrote {report.written} rows ({source}) to {report.output}")
    if report.rejected:
        typer.echo(
            f"skipped {len(report.rejected)} invalid rows, listed with reasons in "
            f"{report.rejects_file}",
            err=True,
        )
