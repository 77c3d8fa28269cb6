"""The report page: one self-contained HTML file (``report.html``) a colleague can open offline.

It holds Table 1 as ``report`` renders it (:func:`gppo.analysis.tables.render.to_html`, so columns added
there appear here too), every figure the report wrote (PNG files, embedded as base64 ``data:``
URIs: Figures 1-2 and the clip-by-μ figure first, then any other figure under "More figures"),
one row per cell (status, attempt, steps, avg@k, wall time, CPU/GPU-hours, a link to its MLflow
run when the tracking URI is an http(s) server), the spec as run, the seeds, package versions,
the project's git commit and the date. No external resource: no script, font or stylesheet link.

The layout is the Jinja2 template ``templates/report.html.j2`` (package data).
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import platform
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import pandas as pd
from markupsafe import Markup

from gppo.analysis.data.tidy import CPU_HOURS, GPU_HOURS
from gppo.analysis.tables.render import to_html
from gppo.analysis.tables.table1_model import Table1
from gppo.store.cost import Hours, fmt_hours, money_text
from gppo.store.run_score import score_text
from gppo.store.uri import redact, scheme_of

if TYPE_CHECKING:
    from gppo.grid.schema import GridSpec

PAGE_NAME = "report.html"
#: figures in page order, with their captions; any other PNG goes to "More figures"
FIGURES: dict[str, str] = {
    "figure1_regions": (
        "Figure 1. Proximal regions [r_lo, r_hi] against the behaviour probability μ, one panel"
        " per divergence (δ calibrated from r_min); the grey band is the MC region."
    ),
    "figure2_dynamics": (
        "Figure 2. Training dynamics: training score (top row) and policy entropy (bottom row)"
        " against the step; one panel per divergence with its estimators and the reference,"
        " the baselines in their own panel (mean over seeds, band: min-max over seeds)."
    ),
    "figure2_clip_by_mu": (
        "Clip fraction per μ bucket for each estimator: the mean over runs (each run's mean"
        " over steps; the runs of every divergence pooled) with its 95% t interval over runs:"
        " where Atomic and Binary clip differently from MC."
    ),
    "aggregate_intervals": (
        "Aggregate view (after Agarwal et al., 2021): mean and interquartile mean over"
        " benchmarks per cell over runs: the mean with its 95% t interval (Table 1's Avg.), the"
        " IQM with a 95% bootstrap interval (whole runs resampled; too narrow with few runs)."
    ),
    "aggregate_improvement": (
        "Probability of improvement P(cell > reference) over seeds and benchmarks, with 95%"
        " bootstrap intervals over runs (too narrow with few runs); 0.5 means no difference."
    ),
}
PACKAGES = (
    "gppo-sweep", "torch", "numpy", "pandas", "matplotlib", "mlflow", "ray", "optuna",
    "verl", "vllm", "transformers",
)  # fmt: skip


@dataclass
class PageInput:
    """What the page shows; everything but ``table`` and ``sweep_id`` is optional."""

    sweep_id: str
    table: Table1
    figures: Sequence[Path] = ()
    runs: pd.DataFrame | None = None  # Collected.runs: one row per cell (latest attempt)
    tidy: pd.DataFrame | None = None  # scores per (domain, cell, seed, benchmark)
    cells: Sequence[Any] = ()  # the spec's expanded cells (resources per cell id)
    spec: Mapping[str, Any] | None = None  # the spec as run (defaults filled in)
    tracking_uri: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None
    k: int | None = None
    warnings: Sequence[str] = ()
    extra: dict[str, str] = field(default_factory=dict)  # more "about this report" lines
    #: more sections after Table 1, ``(id, title, html)`` (a sweep with axes: every point's
    #: Table 1, the rank stability, each cell at its best point)
    sections: Sequence[tuple[str, str, str]] = ()
    #: adaptive seeds: the summary's seeds part, ``adaptive seeds 2-8: 14 runs of at most 40``
    #: (:func:`gppo.analysis.tables.adaptive_stops.runs_line`)
    adaptive: str | None = None


def embed_png(path: Path) -> str:
    """``data:image/png;base64,...`` of a PNG file."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def figure_items(paths: Sequence[Path]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(main figures in :data:`FIGURES` order, other figures) as ``{title, caption, src}``."""
    pngs = {p.stem: p for p in paths if p.suffix.lower() == ".png" and p.exists()}
    main = [
        {"id": stem, "caption": FIGURES[stem], "src": embed_png(pngs[stem])}
        for stem in FIGURES
        if stem in pngs
    ]
    more = [
        {"id": stem, "caption": stem.replace("_", " "), "src": embed_png(p)}
        for stem, p in sorted(pngs.items())
        if stem not in FIGURES
    ]
    return main, more


def table_fragment(table: Table1) -> tuple[str, str]:
    """(the CSS, the body) of Table 1's HTML rendering, to inline in the page."""
    html = to_html(table)
    style = "\n".join(re.findall(r"<style[^>]*>(.*?)</style>", html, flags=re.S))
    return style, html_body(html)


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that shape the results (absent ones left out)."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit(where: Path | None = None) -> str:
    """The project's commit (``abc123…``, ``+ local changes`` when the tree is dirty), or
    ``unknown`` outside a git checkout."""
    where = where or Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" + local changes" if dirty else "")


def run_link(tracking_uri: str | None, experiment_id: str | None, run_id: str) -> str | None:
    """The run's page on an http(s) tracking server, else None."""
    if not (tracking_uri and experiment_id and run_id):
        return None
    if scheme_of(tracking_uri) not in ("http", "https"):
        return None
    from gppo.sweep.monitor.mlflow_ui import run_url

    return run_url(tracking_uri, experiment_id, run_id)


def _num(x: Any) -> float | None:
    try:
        value = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    from gppo.sweep.monitor.launch_log import fmt_duration

    return fmt_duration(seconds)


def _run_hours(run: Any, res: Any, secs: float | None) -> tuple[float | None, float | None]:
    """(CPU-h, GPU-h) of a cell's runs: what was logged for every attempt
    (:mod:`gppo.store.cost`), else (a run from before cost was logged) its resources x wall time."""
    logged = _num(getattr(run, CPU_HOURS, None))
    if logged is not None:
        return logged, _num(getattr(run, GPU_HOURS, None)) or 0.0
    if res is None or secs is None:
        return None, None
    return secs / 3600 * res.num_cpus, secs / 3600 * res.num_gpus


def cell_rows(page: PageInput) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """One row per cell run (``Collected.runs``) and the totals (wall time, CPU/GPU-hours); every
    figure in a row is that run's own (its avg@k: its ``seed_score``, printed as Table 1 prints,
    so two axis points' runs of one cell and seed each show theirs)."""
    if page.runs is None or not len(page.runs):
        return [], {}
    resources = {c.id: c.resources for c in page.cells}
    rows, wall, cpu_h, gpu_h = [], 0.0, 0.0, 0.0
    for r in page.runs.sort_values(["domain", "cell_id"]).itertuples(index=False):
        res = resources.get(r.cell_id)
        secs = _num(r.wall_time_s)
        cpus, gpus = _run_hours(r, res, secs)
        wall += secs or 0.0
        cpu_h, gpu_h = cpu_h + (cpus or 0.0), gpu_h + (gpus or 0.0)
        score = _num(getattr(r, "seed_score", None))  # the run's own (gppo.store.run_score)
        rows.append(
            {
                "cell_id": r.cell_id,
                "domain": r.domain,
                "label": r.cell,
                "seed": r.seed,
                "status": r.status,
                "attempt": r.attempt,
                "steps": "-" if (steps := _num(r.steps)) is None else f"{int(steps)}",
                "avg": "-" if score is None else score_text(score),
                "wall": _duration(secs),
                "cpu_h": "-" if cpus is None else fmt_hours(cpus),
                "gpu_h": "-" if gpus is None else fmt_hours(gpus),
                "run_id": r.run_id,
                "link": run_link(page.tracking_uri, page.experiment_id, str(r.run_id)),
            }
        )
    price = page.table.cost.price if page.table.cost else None
    money = Hours(cpu_h, gpu_h).money(price)
    totals = {
        "wall": _duration(wall),
        "cpu_h": fmt_hours(cpu_h),
        "gpu_h": fmt_hours(gpu_h),
        "money": money_text(money, price) if money is not None and price else "",
    }
    return rows, totals


def _seeds(page: PageInput) -> str:
    seeds = sorted({int(c.seed) for c in page.cells})
    if not seeds and page.runs is not None and len(page.runs):
        seeds = sorted({int(s) for s in page.runs["seed"]})
    return ", ".join(map(str, seeds)) or "-"


def _summary(
    rows: list[dict[str, Any]], totals: dict[str, str], seeds: str, adaptive: str | None = None
) -> str:
    """``17 cells (17 done) · seeds 0 · wall time 21m36s · 0.360 CPU-h · 0 GPU-h``; with
    adaptive seeds ``adaptive seeds 2-8: 14 runs of at most 40`` in place of the seeds."""
    seeds_text = adaptive or f"seeds {seeds}"
    if not rows:
        return seeds_text
    states: dict[str, int] = {}
    for r in rows:
        states[r["status"]] = states.get(r["status"], 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return (
        f"{len(rows)} cells ({counts}) · {seeds_text} · wall time {totals['wall']} (sum over"
        f" cells) · {totals['cpu_h']} CPU-h · {totals['gpu_h']} GPU-h"
        + (f" · {totals['money']}" if totals.get("money") else "")
    )


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("gppo.analysis.page", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )


def render_page(page: PageInput, now: dt.datetime | None = None) -> str:
    """The whole page as one HTML string, every URI's password in it redacted
    (:func:`gppo.store.uri.redact`)."""
    import yaml

    now = now or dt.datetime.now(dt.timezone.utc)
    style, table_html = table_fragment(page.table)
    main, more = figure_items(page.figures)
    rows, totals = cell_rows(page)
    spec_text = (
        yaml.safe_dump(dict(page.spec), sort_keys=False, allow_unicode=True) if page.spec else ""
    )
    about = {
        "sweep": page.sweep_id,
        "generated": now.strftime("%Y-%m-%d %H:%M UTC"),
        "seeds": _seeds(page),
        "k (avg@k)": str(page.k) if page.k else "-",
        "reference": page.table.reference,
        "git commit": git_commit(),
        "tracking URI": page.tracking_uri or "-",
        "MLflow parent run": page.parent_run_id or "-",
        **page.extra,
    }
    # a published file: every URI's password (the spec's tracking URI, a link) shown as ***
    return redact(
        _env()
        .get_template("report.html.j2")
        .render(
            title=f"GPPO sweep {page.sweep_id}",
            table_style=Markup(style),
            table_html=Markup(table_html),
            figures=main,
            more_figures=more,
            rows=rows,
            totals=totals,
            k=page.k,
            about=about,
            versions=package_versions(),
            spec_text=spec_text,
            warnings=list(page.warnings),
            summary=_summary(rows, totals, about["seeds"], page.adaptive),
            sections=[
                {"id": i, "title": t, "html": Markup(html_body(h))} for i, t, h in page.sections
            ],
        )
    )


def html_body(html: str) -> str:
    """The body of an HTML document (the whole text when it has none)."""
    found = re.search(r"<body[^>]*>(.*)</body>", html, flags=re.S)
    return found.group(1) if found else html


def write_page(page: PageInput, out_dir: str | Path) -> Path:
    """Write ``report.html`` into ``out_dir``; returns its path."""
    path = Path(out_dir) / PAGE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(page), encoding="utf-8")
    return path


def spec_as_run(spec: GridSpec) -> dict[str, Any]:
    """A loaded grid spec as YAML-ready data, as it ran: every default filled in and the
    backend's section (``local:``, ``verl:``) with its resolved settings (its raw section for a
    backend that is not available here)."""
    from gppo.backends.base import get_backend
    from gppo.errors import UnknownNameError
    from gppo.grid.load import spec_to_yaml

    try:
        settings = get_backend(spec.backend).validate_settings(spec.settings)
    except (UnknownNameError, ImportError):  # not installed here: the section as written
        return spec_to_yaml(spec, defaults=True)
    spec = spec.model_copy(update={"settings": settings.model_dump(mode="json")})
    return spec_to_yaml(spec, defaults=True)
