"""``gppo-sweep``: a thin typer app over :mod:`gppo.grid` and :mod:`gppo.sweep`.

Ray and MLflow are imported inside the commands that need them, so ``--help`` and ``plan`` stay
fast. Spec errors print one line (``FILE: field.path: message``) on stderr and exit with code 2.
Every command that takes a spec also takes ``KEY=VALUE`` overrides of it (:mod:`gppo.cli.args`,
:mod:`gppo.grid.overrides`); an explicit option wins over the override of the same setting.

Other packages add commands with :func:`add_command` / :func:`add_group`, e.g.
``add_command(gppo.cli.report.report)`` or ``add_group(tune_app, "tune")``.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from gppo.cli.args import OverridesArg, only_overrides, positionals
from gppo.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, F, fail, one_line_errors
from gppo.cli.help_text import flowing

app = typer.Typer(
    name="gppo-sweep",
    help="Run the GPPO Divergence x Estimator grid as Ray jobs tracked in MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

SpecArg = Annotated[Path, typer.Argument(help="grid spec (YAML)", show_default=False)]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address", help="Ray Jobs API address (default: RAY_ADDRESS, else a local head)"
    ),
]


def command(name: str | None = None) -> Callable[[F], F]:
    """``app.command()`` whose errors end as one line and their code (:mod:`gppo.cli.exit_codes`)."""

    def deco(fn: F) -> F:
        app.command(name=name, help=flowing(fn.__doc__))(one_line_errors(fn))
        return fn

    return deco


def add_command(fn: Callable[..., object], name: str | None = None) -> None:
    """Register a typer-annotated function as a sub-command (for other packages)."""
    command(name)(fn)


def add_group(sub: typer.Typer, name: str) -> None:
    """Register a typer sub-app as a command group (e.g. ``tune``, ``data``)."""
    app.add_typer(sub, name=name)


def _plan(spec: Path, overrides: list[str] | None = None):
    """The spec's plan, edited by the command line's ``KEY=VALUE`` overrides."""
    from gppo.grid import load_plan

    return load_plan(spec, overrides or ())


def _console():
    """rich's console; 100 columns when stdout is not a terminal (rich's default is 80)."""
    import os

    from rich.console import Console

    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(width=100)
    return console


@command()
def plan(
    spec: SpecArg,
    overrides: OverridesArg = None,
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON list of cells")] = False,
    resolved: Annotated[
        bool,
        typer.Option(
            "--resolved",
            help="print the spec as it runs, as YAML: the overrides applied, every default "
            "filled in (a file that plans the same)",
        ),
    ] = False,
) -> None:
    """Show the cells of a spec: coordinates, δ, proximal region at μ = 0.01/0.1/0.5/0.9, seed, and
    each cell's exact job command."""
    from gppo.grid.load import plan_rows

    p = _plan(spec, only_overrides(overrides))
    if resolved:
        _print_resolved(p)
        return
    from gppo.sweep.planning.budget import check_budget
    from gppo.sweep.planning.forecast import forecast

    # the cost forecast (gppo.sweep.planning.forecast), before anything is printed: a budget below one
    # run is refused in one line (--json prints no forecast: none made without a budget)
    fc = forecast(p) if not as_json or p.spec.budget else None
    if fc is not None:
        check_budget(p, fc)
    rows = plan_rows(p)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    from rich.console import Console

    console = _console()
    from gppo.grid.sharing import runs_text

    title = f"sweep {p.sweep_id}: {runs_text(p.cells)}"
    table = _plan_table(rows, list(p.spec.axes), title, full=True)
    if Console(width=1000).measure(table).maximum > console.width:
        table = _plan_table(rows, list(p.spec.axes), title, full=False)
    console.print(table)
    console.print("[bold]job commands[/bold] (environment, then argv)")
    for r in rows:
        env = " ".join(
            f"{k}={v if v.startswith('<') and v.endswith('>') else shlex.quote(v)}"
            for k, v in r["env"].items()
        )
        console.print(f"{r['cell']}: ", end="", markup=False, highlight=False)
        console.print(f"{env} {r['command']}", markup=False, highlight=False, soft_wrap=True)
    from gppo.sweep.planning.plan_summary import (
        plan_lines,  # axes, run count, the forecast, the budget
    )

    for line in plan_lines(p, fc):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if p.overrides:
        console.print(f"overrides: {shlex.join(p.overrides)}", markup=False, highlight=False)


def _print_resolved(p: Any) -> None:
    """``plan --resolved``: the spec in its YAML shape, every default filled in."""
    import yaml

    from gppo.grid.load import spec_resolved

    head = f"# {p.source}" + (f" with {shlex.join(p.overrides)}" if p.overrides else "")
    text = yaml.safe_dump(spec_resolved(p.spec), sort_keys=False, allow_unicode=True)
    sys.stdout.write(f"{head}, resolved (sweep {p.sweep_id})\n{text}")


def _plan_table(rows: list[dict[str, Any]], axes: list[str], title: str, *, full: bool) -> Any:
    """``plan``'s table: the cell id (never cut: other columns wrap first), one column per axis
    (its value, or "all" where the axis does not move the cell: one set of runs stands at every
    point), δ, the region at each μ and the seed; ``full``: also method, divergence and estimator
    (the id says them too: a console too narrow for them gets the compact table without them)."""
    from rich import box
    from rich.table import Table

    from gppo.cell import axis_value_text
    from gppo.grid.axes import short_names
    from gppo.grid.load import fmt_interval

    names = short_names(axes)
    table = Table(title=title)
    if not full:
        table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
    width = max((len(r["cell"]) for r in rows), default=4)
    table.add_column("cell", no_wrap=True, min_width=width)
    for name in names.values():
        table.add_column(name, no_wrap=True)
    for col in ("method", "divergence", "estimator") if full else ():
        table.add_column(col)
    table.add_column("δ")
    for mu in rows[0]["mus"] if rows else ():
        table.add_column(f"μ={mu}")
    table.add_column("seed", no_wrap=True)
    for r in rows:
        regions = [fmt_interval(*x) for x in r["region"]] if r["region"] else ["-"] * len(r["mus"])
        delta = "-" if r["delta"] is None else f"{r['delta']:.4g}"
        point = [axis_value_text(r["axes"][a]) if a in r["axes"] else "all" for a in names]
        coords = [r["method"], r["divergence"] or "-", r["estimator"] or "-"] if full else []
        table.add_row(r["cell"], *point, *coords, delta, *regions, str(r["seed"]))
    return table


@command()
def check(
    spec: SpecArg,
    overrides: OverridesArg = None,
    train_step: Annotated[
        bool,
        typer.Option(
            "--train-step",
            help="then one real training step per cell on this machine, where the spec's "
            "backend has one (its Backend.preflight_train_step; other backends refuse it)",
        ),
    ] = False,
) -> None:
    """Pre-flight a spec on this machine through its backend's own checks (Backend.preflight:
    each cell's settings and loss, run before anything is launched); one line per cell, exit 1
    if any fails."""
    import time

    from gppo.backends.base import get_backend

    p = _plan(spec, only_overrides(overrides))
    start = time.monotonic()
    backend = get_backend(p.spec.backend)
    backend.check_options(str(spec), train_step=train_step)
    results = backend.preflight(p, str(spec), lambda line: typer.echo(line), train_step=train_step)
    cells = {r.cell for r in results}
    failed = len({r.cell for r in results if not r.ok})
    typer.echo(f"{len(cells) - failed}/{len(cells)} cells ok ({time.monotonic() - start:.0f} s)")
    if failed:
        raise typer.Exit(EXIT_FAILED)


@command()
def launch(
    spec: SpecArg,
    overrides: OverridesArg = None,
    address: AddressOpt = None,
    max_concurrent: Annotated[
        int | None,
        typer.Option(
            "--max-concurrent",
            min=1,
            help="override ray.max_concurrent (wins over ray.max_concurrent=N)",
        ),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", help="on Ctrl-C, leave running jobs running")
    ] = False,
) -> None:
    """Run every unfinished cell as a Ray job (resumes: finished cells are skipped)."""
    p = _plan(spec, only_overrides(overrides))
    from gppo.analysis.report_writer import after_sweep
    from gppo.store.state import State
    from gppo.sweep.launch import Launcher
    from gppo.sweep.monitor.terminal import LaunchOutput

    console = _console()
    slots = max_concurrent or p.spec.ray.max_concurrent
    out = LaunchOutput(console, slots=slots)  # one line per launcher event, nothing read back
    launcher = Launcher(
        p,
        address=address,
        max_concurrent=max_concurrent,
        detach=detach,
        on_update=out.update,
        on_event=out.event,
        after_sweep=after_sweep,
    )
    try:  # LaunchBusy and StoreNotShared (nothing written or submitted) end as one line
        with out:
            result = launcher.run()
    except KeyboardInterrupt:  # before dispatch began: nothing was submitted by this launch
        raise fail(
            "interrupted before dispatch started; nothing submitted", EXIT_INTERRUPTED
        ) from None
    out.summary(result)
    if (
        result.left
    ):  # the budget's (gppo.sweep.planning.budget): pending, for a relaunch with a larger one
        console.print(f"left by the budget ({len(result.left)} runs):", highlight=False)
        for cell_id, why in result.left.items():
            console.print(f"  {cell_id}: {why}", markup=False, highlight=False)
    if result.lost:
        raise fail(
            f"{spec}: another launcher took sweep {result.sweep_id} over while this one was "
            "not heard from (its lease went stale); its jobs and runs are left to that launcher",
            EXIT_FAILED,
        )
    for st in result.cells.values():
        if st.state is State.FAILED:
            console.print(f"[red]failed[/red] {st.cell.id}: {st.note}", highlight=False)
    if result.report is not None:
        from gppo.analysis.tables.render import print_table1

        axes = getattr(result.report, "axes", None)
        if axes is not None:  # one table of many: the spec's own point (all: table1.md)
            console.print(f"Table 1 at {axes.tables[axes.home].label}", markup=False)
        print_table1(console, result.report.table)
        folder = result.report.files[0].parent if result.report.files else "?"
        what = (
            "tables and figures" if p.spec.analysis.figures else "tables; analysis.figures: false"
        )
        console.print(f"report ({what}): {folder}", markup=False)
        if getattr(result.report, "page", None) is not None:
            console.print(f"report page (one HTML file): {result.report.page}", markup=False)
    if result.count(State.DONE):
        again = shlex.join([str(spec), *p.overrides])
        console.print(  # one line, a command to copy
            f"compare the runs in the MLflow UI: gppo-sweep ui {again}",
            markup=False,
            soft_wrap=True,
        )
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


@command()
def status(
    spec: SpecArg,
    overrides: OverridesArg = None,
    address: AddressOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Per cell: state, attempt, step, latest train score, final eval, run id; with adaptive
    seeds a cell the rounds will not ask for is ``unneeded`` (its row decided) or ``row failed``
    (its row stopped on a failed seed), and each row that has stopped says why (``kl/atomic:
    separated at 4 seeds, Δ -3.1 [-5.9, -0.4]``)."""
    p = _plan(spec, only_overrides(overrides))
    from gppo.sweep.monitor.commands import sweep_status

    rounds = None
    if p.spec.adaptive is not None:
        from gppo.stats.rounds import Rounds

        rounds = Rounds.of_plan(p)
    rows = sweep_status(p, address=address)
    if as_json:
        sys.stdout.write(json.dumps([r.to_dict() for r in rows], indent=1) + "\n")
        return
    from gppo.store.cost import Hours
    from gppo.store.state import State
    from gppo.sweep.monitor.terminal import status_table
    from gppo.sweep.planning.forecast import forecast, status_lines

    console = _console()
    console.print(f"sweep {p.sweep_id}")
    console.print(status_table(rows))
    paid = sum(
        (Hours(r.cpu_hours, r.gpu_hours or 0.0, 0.0, 1) for r in rows if r.cpu_hours is not None),
        Hours(),
    )
    open_ids = [r.cell for r in rows if r.state != State.DONE and not r.unneeded]
    if rounds is not None:
        from gppo.analysis.tables.adaptive_stops import stop_lines

        scores = {r.cell: r.seed_score for r in rows if r.seed_score is not None}
        failed = {r.cell for r in rows if r.state == State.FAILED}  # no retry left
        for line in stop_lines(rounds, scores, failed):
            console.print(line, markup=False, highlight=False)
    for line in status_lines(forecast(p), paid, open_ids, p.spec.price):
        console.print(line, markup=False, highlight=False)
    for fix in dict.fromkeys(r.fix for r in rows if r.fix):  # the tracking server refused nodes
        console.print(f"to fix: {fix}", markup=False, highlight=False)


@command()
def logs(
    spec: SpecArg,
    args: Annotated[
        list[str],
        typer.Argument(
            metavar="CELL [KEY=VALUE]...",
            help="cell id, e.g. kl-atomic-s0; then spec overrides as for launch",
            show_default=False,
        ),
    ],
    address: AddressOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
) -> None:
    """Print the job log of a cell's latest attempt."""
    (cell,), overrides = positionals(args, ("CELL",), required=1)
    p = _plan(spec, overrides)
    from gppo.sweep.monitor.commands import cell_logs

    for chunk in cell_logs(p, cell, address=address, follow=follow):
        sys.stdout.write(chunk)
        sys.stdout.flush()


@command()
def cancel(
    spec: SpecArg,
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[CELL] [KEY=VALUE]...",
            help="only this cell; then spec overrides as for launch",
            show_default=False,
        ),
    ] = None,
    address: AddressOpt = None,
) -> None:
    """Stop the sweep's running jobs (or one cell's); without CELL also stop its local Ray head."""
    cells, overrides = positionals(args, ("[CELL]",))
    cell = cells[0] if cells else None
    p = _plan(spec, overrides)
    from gppo.sweep.monitor.commands import cancel as do_cancel

    stopped = do_cancel(p, cell, address=address)
    typer.echo(f"stopped {len(stopped)} cell(s)" + (f": {', '.join(stopped)}" if stopped else ""))


@command()
def ui(
    spec: SpecArg,
    overrides: OverridesArg = None,
    host: Annotated[str, typer.Option(help="bind address (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 5000,
    open_browser: Annotated[
        bool, typer.Option("--open", help="open the sweep's runs in a browser once it is up")
    ] = False,
) -> None:
    """Serve the MLflow UI on the sweep's tracking store; print the URL of the sweep's runs (its
    cells, best first) and of MLflow's compare view of its cells. ``/`` leads to the runs."""
    import os

    from gppo.store.uri import is_tracking_server, resolve_tracking_uri
    from gppo.sweep.monitor.mlflow_ui import ENV_HOME, JOB_EXECUTION, serve, sweep_urls

    p = _plan(spec, only_overrides(overrides))
    uri = resolve_tracking_uri(p.spec.tracking.uri)
    served = not is_tracking_server(uri)  # a tracking server serves its own UI
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    base = f"http://{shown}:{port}" if served else uri.rstrip("/")
    urls = sweep_urls(p, base)

    def announce() -> None:  # printed once the server answers: every URL printed opens
        typer.echo(f"MLflow UI for sweep {p.sweep_id}: {base}", err=True)
        typer.echo(
            f"sweep runs: {urls.get('runs', base + ' (no runs yet: launch the sweep first)')}"
        )
        if "compare" in urls:
            typer.echo(f"compare cells: {urls['compare']}")

    target = urls.get("runs", base)
    if not served:  # a tracking server already: nothing to start
        announce()
        if open_browser:
            import webbrowser

            webbrowser.open(target)
        return
    helpers = []
    if open_browser:
        import subprocess

        code = "import sys; from gppo.sweep.monitor.mlflow_ui import wait_and_open; wait_and_open(*sys.argv[1:])"
        helpers.append(subprocess.Popen([sys.executable, "-c", code, target, f"{base}/health"]))
    mlflow = str(Path(sys.executable).with_name("mlflow"))
    argv = [mlflow, "server", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    argv += ["--workers", "1", "--app-name", "gppo-sweep"]
    typer.echo(f"starting the MLflow UI for sweep {p.sweep_id} on {base} ...", err=True)
    # MLflow's job runner (GenAI evaluation jobs: 7 huey processes, ~1.7 GB, ~15 s to stop) is
    # not what a sweep's UI needs; MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true in the env keeps it
    env = {JOB_EXECUTION: "false", **os.environ, ENV_HOME: urls.get("home", "")}
    rc = serve(argv, env, helpers, ready_url=f"{base}/health", on_ready=announce)
    raise typer.Exit(rc)


def _register_other_packages() -> None:
    """The commands that live beside the library they drive (report, regions, tune, schema,
    init, data)."""
    from gppo.cli.data import data_app
    from gppo.cli.report import regions, report
    from gppo.cli.specs import init, schema
    from gppo.cli.tune import tune

    add_command(report)
    add_command(regions)
    add_command(tune)
    add_command(schema)
    add_command(init)
    add_group(data_app, "data")


_register_other_packages()


def main() -> None:  # pragma: no cover - console entry point
    app()
