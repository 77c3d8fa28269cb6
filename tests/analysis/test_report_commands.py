"""`gppo-sweep report` / `regions` through typer, and one-line errors for bad CSV input."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gppo.analysis.data.tidy import ReportInputError, read_scores_csv
from gppo.cli.report import regions, report
from gppo.grid import load_plan

PAPER_CSV = Path(__file__).parent / "data" / "paper_table1.csv"
HEADER = "domain,cell,benchmark,seed,score\n"

app = typer.Typer()
app.command()(report)
app.command()(regions)
runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("domain,cell,seed,score\nm,tv/mc,0,0.1\n", "missing column(s) benchmark; required: "),
        (HEADER + "m,tv/mc,A,0,abc\n", "row 2, column score: 'abc' is not a number"),
        (
            HEADER + "m,tv/mc,A,0,0.1\nm,kl/mc,A,0,34.6\n",
            "row 3, column score: 34.6 is outside [0, 1]",
        ),
        (HEADER + "m,tv/mc,A,x,0.1\n", "row 2, column seed: 'x' is not an integer"),
        (
            "domain,cell,benchmark,seed,score,colour\nm,a,A,0,0.1,red\n",
            "unknown column 'colour'; allowed: ",
        ),
        (
            "domain,cell,benchmark,seed,score,status\nm,a,,0,,lost\n",
            "column status: 'lost'; allowed: done, failed, stopped, running, pending, finished, missing",
        ),
        (
            HEADER + "m,tv/mc,A,0,0.1\nm,tv/mc,A,0,0.2\n",
            "row 3: duplicate (domain, cell, benchmark, seed)",
        ),
        (HEADER + ",tv/mc,A,0,0.1\n", "row 2, column domain: empty"),
        ("", "not a readable CSV"),
    ],
)
def test_bad_csv_one_line_error_naming_file_row_column(tmp_path, text, expected):
    path = tmp_path / "scores.csv"
    path.write_text(text)
    with pytest.raises(ReportInputError) as err:
        read_scores_csv(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message


@pytest.mark.slow
def test_report_from_csv_writes_every_format_and_prints_the_table(tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["report", "--from-csv", str(PAPER_CSV), "-o", str(out)])
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert {"table1.md", "table1.tex", "table1.html", "table1.csv"} <= names
    assert {"figure1_regions.png", "figure1_regions.svg"} <= names
    assert "41.5" in result.output and "+49.82%" in result.output and "(RIPO)" in result.output


def test_report_from_several_csvs_and_one_format(tmp_path):
    lines = PAPER_CSV.read_text().splitlines()
    math, code = tmp_path / "math.csv", tmp_path / "code.csv"
    math.write_text("\n".join([lines[0], *[ln for ln in lines[1:] if ln.startswith("math")]]))
    code.write_text("\n".join([lines[0], *[ln for ln in lines[1:] if ln.startswith("code")]]))
    out = tmp_path / "out"
    args = ["report", "--from-csv", str(math), str(code), "--format", "csv", "--no-figures"]
    result = runner.invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["table1.csv"]
    text = (out / "table1.csv").read_text()
    assert "math,kl/atomic,48.9,33.9,48.7,34.4,,,,,41.5,49.82" in text
    assert "code,kl/atomic,,,,,70.7,65.1,42.3,60.8,59.7,13.93" in text


def test_report_bad_input_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "math,tv/mc,A,0,41.5\n")
    result = runner.invoke(app, ["report", "--from-csv", str(bad), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"{bad}: row 2, column score: 41.5 is outside [0, 1] (scores are fractions, not percent)"
    )
    result = runner.invoke(app, ["report", "--from-csv", str(bad), "--format", "pdf"])
    assert (
        result.exit_code == 2
        and "unknown format 'pdf'; allowed: md, latex, html, csv, all" in result.output
    )


@pytest.mark.slow
def test_report_from_spec_reads_the_sweep_and_attaches(tmp_path, store):
    spec = tmp_path / "grid.yaml"
    spec.write_text(
        "name: demo\nbackend: local\nlocal: {domain: math}\n"
        "grid: {divergences: [tv, kl], estimators: [mc, atomic]}\n"
        f"tracking: {{uri: '{store.uri}'}}\n"
    )
    plan = load_plan(spec)
    assert plan.spec.tracking.uri == store.uri and len(plan.cells) == 4
    store.sweep(plan.sweep_id)
    bench = list(plan.cells[0].benchmarks)
    store.cell(
        "gppo", "tv", "mc", scores=dict.fromkeys(bench, 0.25), base=dict.fromkeys(bench, 0.1)
    )
    store.cell("gppo", "kl", "atomic", scores=dict.fromkeys(bench, 0.5))
    store.cell("gppo", "kl", "mc", status="RUNNING", finished=False)
    out = tmp_path / "out"
    result = runner.invoke(app, ["report", str(spec), "-o", str(out), "--no-figures"])
    assert result.exit_code == 0, result.output
    md = (out / "table1.md").read_text()
    # kl/mc still running (a), tv/atomic missing (b): marks follow the reasons present
    assert "+100.00%" in md and "—^a" in md and "—^b" in md and "(b) no result, no run" in md
    assert "attached to MLflow run" in result.output
    assert {a.path for a in store.client.list_artifacts(store.parent, "report")} >= {
        "report/table1.md",
        "report/table1.csv",
    }


def test_regions_draws_figure1_and_prints_bounds(tmp_path):
    out = tmp_path / "regions.svg"
    args = ["regions", "-d", "tv", "-d", "kl", "-e", "atomic", "--r-min", "0.8", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    # one panel per divergence, titled with its δ, and the Atomic bounds drawn in each
    assert "<!-- TV (δ = 0.2) -->" in svg and "<!-- KL (δ = 0.2231) -->" in svg
    assert "<!-- Atomic r_lo -->" in svg and "<!-- Atomic r_hi -->" in svg
    assert "0.22314" in result.output  # δ_KL = -log 0.8
    assert "1.222" in result.output  # tv-atomic r_hi at μ = 0.9: 1 + 0.2 / 0.9


def test_regions_unknown_divergence_exits_2(tmp_path):
    result = runner.invoke(app, ["regions", "-d", "nope", "-o", str(tmp_path / "f.png")])
    assert result.exit_code == 2
    assert result.output.startswith("unknown divergence 'nope'") and "tv" in result.output


def test_report_default_folder_is_the_one_the_launcher_uses(tmp_path, monkeypatch):
    from gppo.analysis.report_writer import REPORTS_DIR

    monkeypatch.chdir(tmp_path)
    args = ["report", "--from-csv", str(PAPER_CSV), "--format", "csv", "--no-figures"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "reports/from-csv" in result.output
    # what a reader of the file relies on: one row per (domain, cell) of the input, each
    # benchmark's score in percent, Avg. their mean (both shown to one decimal), the reference's
    # relative change 0
    with (tmp_path / REPORTS_DIR / "from-csv" / "table1.csv").open() as f:
        rows = {(r["domain"], r["cell"]): r for r in csv.DictReader(f)}
    scores: dict[tuple[str, str], dict[str, float]] = {}
    with PAPER_CSV.open() as f:
        for r in csv.DictReader(f):
            scores.setdefault((r["domain"], r["cell"]), {})[r["benchmark"]] = float(r["score"])
    assert rows.keys() == scores.keys()
    for key, by_bench in scores.items():
        row = rows[key]
        for bench, score in by_bench.items():
            assert float(row[bench]) == pytest.approx(100 * score, abs=0.051), (key, bench)
        mean = 100 * sum(by_bench.values()) / len(by_bench)
        assert float(row["avg"]) == pytest.approx(mean, abs=0.051), key
        assert row["n_seeds"] == "1" and row["significant"] == "false", key
    assert float(rows[("math", "tv/mc")]["rel_pct"]) == 0.0


def test_report_of_a_sweep_that_never_ran_exits_2_with_one_line(tmp_path, store):
    spec = tmp_path / "grid.yaml"
    spec.write_text(f"name: demo\nbackend: local\ntracking: {{uri: '{store.uri}'}}\n")
    sweep_id = load_plan(spec).sweep_id
    result = runner.invoke(app, ["report", str(spec), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"{store.uri}: no sweep {sweep_id!r} in experiment 'demo' (launch it first)"
    )
    assert not (tmp_path / "o").exists()  # nothing half-written


@pytest.mark.slow  # the first figure of a fresh HOME builds matplotlib's font cache (fc-list)
@pytest.mark.parametrize(
    ("in_spec", "flag", "drawn"),
    [
        (True, None, True),
        (False, None, False),
        (False, "--figures", True),
        (True, "--no-figures", False),
    ],
)
def test_report_draws_the_figures_as_the_spec_says_unless_the_flag_says_otherwise(
    tmp_path, store, in_spec, flag, drawn
):
    """``analysis.figures`` is the default of ``report`` (and of launch's report); the command
    line's ``--figures`` / ``--no-figures`` wins over it."""
    spec = tmp_path / "grid.yaml"
    spec.write_text(
        "name: demo\nbackend: local\nlocal: {domain: math}\n"
        "grid: {divergences: [tv, kl], estimators: [mc]}\n"
        f"analysis: {{figures: {str(in_spec).lower()}}}\n"
        f"tracking: {{uri: '{store.uri}'}}\n"
    )
    plan = load_plan(spec)
    store.sweep(plan.sweep_id)
    bench = list(plan.cells[0].benchmarks)
    for div, score in (("tv", 0.25), ("kl", 0.5)):
        store.cell(
            "gppo", div, "mc", scores=dict.fromkeys(bench, score), base=dict.fromkeys(bench, 0.1)
        )
    out = tmp_path / "out"
    args = ["report", str(spec), "-o", str(out), "--no-attach", *([flag] if flag else [])]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (out / "table1.md").is_file() and (out / "report.html").is_file()
    assert (out / "figure1_regions.png").is_file() is drawn, sorted(p.name for p in out.iterdir())
