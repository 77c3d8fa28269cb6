"""Adaptive seeds in the reports (issue 48): Table 1 in every format says why each row stopped
and shows the design's interval; the page says the runs used; ``status`` shows the cells the
rounds did not need as ``unneeded`` and one line per row that has stopped."""

from __future__ import annotations

import io
import json
import math

import pandas as pd
import pytest
import sweep.probe_backend  # noqa: F401  # registers the probe backend
from typer.testing import CliRunner

from gppo.analysis.data.collect import collect
from gppo.analysis.data.tidy import normalise
from gppo.analysis.report_writer import write_report
from gppo.analysis.tables.adaptive_stops import (
    RULE_DOC,
    cell_scores,
    label_stops,
    mark_table,
    stop_line,
    stops_at,
    without_unneeded,
)
from gppo.analysis.tables.render import notes, render, to_rich
from gppo.analysis.tables.table1 import build_table1
from gppo.backends.cell_run import CellRun
from gppo.grid import load_plan
from gppo.stats.rounds import OPEN, Rounds, RowStop, row_of
from gppo.stats.sequential import Design
from gppo.sweep.running.dispatcher import submission_id

BENCHES = ("add", "sub")
DESIGN = Design(min_seeds=2, max_seeds=4, rows=3)
STOPS = {
    "kl/mc": RowStop("separated", "bound", 2, -20.04, (-31.83, -8.18)),
    "kl/atomic": RowStop("futile", "max", 4, 1.44, (-3.65, 6.45)),
    "gspo": RowStop(OPEN, "budget", 2, -0.9, (-12.72, 10.92)),
}


def _tidy() -> pd.DataFrame:
    """tv/mc (the reference) and kl/atomic at 4 seeds, kl/mc and gspo at 2, and the base."""
    means = {"tv/mc": 0.40, "kl/mc": 0.20, "kl/atomic": 0.41, "gspo": 0.39, "base": 0.12}
    seeds = {"tv/mc": 4, "kl/mc": 2, "kl/atomic": 4, "gspo": 2, "base": 4}
    rows = [
        {"domain": "math", "cell": cell, "benchmark": b, "seed": s,
         "score": means[cell] + 0.01 * ((s * 7 + i) % 3 - 1)}
        for cell in means for s in range(seeds[cell]) for i, b in enumerate(BENCHES)
    ]  # fmt: skip
    return normalise(pd.DataFrame(rows))


def _table(adaptive: bool):
    table = build_table1(_tidy(), reference="tv/mc", k=8)
    if adaptive:
        mark_table(table, STOPS, DESIGN)
    return table


def _md_row(md: str, label: str) -> list[str]:
    line = next(ln for ln in md.splitlines() if f"| {label}" in ln)
    return [c.strip() for c in line.strip("|").split("|")]


def test_markdown_says_why_each_row_stopped_with_the_designs_interval():
    fixed, table = render(_table(False), "md"), _table(True)
    md = render(table, "md")
    assert "Stopped" not in fixed and RULE_DOC not in fixed
    header = _md_row(md, "Divergence")
    at = header.index("Stopped")
    assert header[at - 1] == "Seeds"
    kl_mc = _md_row(md, "KL")
    assert kl_mc[at] == "separated at 2 seeds"
    # the design's Δ̂ and repeated CI at its look, not the fixed-n t CI; † from the rule
    assert kl_mc[header.index("Δ vs tv/mc (pts)")] == "-20.0 [-31.8, -8.2]†"
    atomic = _md_row(md, "Atomic")
    assert atomic[at] == "not separable within max (4 seeds)"
    assert atomic[header.index("Δ vs tv/mc (pts)")] == "+1.4 [-3.7, 6.5]"  # no mark: not separated
    gspo = _md_row(md, "Other baselines")
    assert gspo[at] == "left by the budget at 2 seeds"
    assert _md_row(md, "TV")[at] == "reference"
    base = _md_row(md, "Base model")
    assert base[at] == "—" and "[" not in base[header.index("Δ vs tv/mc (pts)")]
    note = next(n for n in notes(table) if RULE_DOC in n)
    assert (
        "intervals valid under the adaptive design: repeated confidence intervals, Holm over 3"
        " rows, α=0.05; docs/statistics.md#adaptive-seeds-the-rule" in note
    )
    assert "repeated looks invalidate them" in md and "Student t CI on the test" not in md
    # issue 58: the bias of an early stop, and the seeds Δ was computed from
    assert "A row stopped early shows a Δ biased away from 0" in note
    assert "mean over the n seeds named in Stopped minus the reference's mean over its first n" in (
        note
    )


def test_latex_html_csv_and_the_terminal_carry_the_stops():
    table = _table(True)
    latex = render(table, "latex")
    assert "Stopped" in latex and "separated at 2 seeds" in latex
    assert "-20.0 [-31.8, -8.2]$^\\dagger$" in latex
    assert "repeated confidence intervals, Holm over 3 rows" in latex
    html = render(table, "html")
    assert (
        "<th" in html and ">Stopped</th>" in html and "not separable within max (4 seeds)" in html
    )
    assert "-20.0 [-31.8, -8.2]†" in html and "adaptive-seeds-the-rule" in html
    csv = pd.read_csv(io.StringIO(render(table, "csv")), dtype=str, keep_default_na=False)
    rows = csv.set_index("cell")
    assert rows.loc["kl/mc", ["stop_status", "stop_reason", "stop_seeds"]].tolist() == [
        "separated", "bound", "2",
    ]  # fmt: skip
    assert rows.loc["kl/mc", "stopped"] == "separated at 2 seeds"
    assert (rows.loc["kl/mc", "delta_ci95_lo"], rows.loc["kl/mc", "delta_ci95_hi"]) == (
        "-31.8", "-8.2",
    )  # fmt: skip
    assert rows.loc["kl/mc", "significant"] == "true" and rows.loc["kl/mc", "p_value"] == ""
    assert (
        rows.loc["gspo", "stop_reason"] == "budget" and rows.loc["tv/mc", "stopped"] == "reference"
    )
    assert rows.loc["base", "stopped"] == "" and rows.loc["base", "delta_ci95_lo"] == ""
    plain = pd.read_csv(io.StringIO(render(_table(False), "csv")), dtype=str)
    assert "stopped" not in plain.columns and "stop_status" not in plain.columns
    from rich.console import Console

    console = Console(width=400, record=True)
    for item in to_rich(table):
        console.print(item)
    shown = console.export_text()
    assert "Stopped" in shown and "left by the budget at 2 seeds" in shown


def test_stop_lines_and_the_points_stops():
    line = stop_line("kl/atomic", RowStop("separated", "bound", 4, -3.14, (-5.93, -0.41)))
    assert line == "kl/atomic: separated at 4 seeds, Δ -3.1 [-5.9, -0.4]"
    same = stop_line("chi2/mc", RowStop("equivalent", "same runs", 2, 0.0, (0.0, 0.0)))
    assert same == "chi2/mc: equivalent: the reference's own runs"
    found = [({"local.lr": 1e-4}, {"a": STOPS["gspo"]}), ({"local.lr": 3e-4}, {"b": STOPS["gspo"]})]
    assert list(stops_at(found, {"local.lr": 3e-4})) == ["b"]
    assert stops_at(found, {"local.lr": 1.0}) == {}


#: the probe backend (tests/sweep/probe_backend.py): ``status`` forecasts without timing a step
SPEC = (
    "name: demo\nbackend: probe\nprobe: {steps: 1}\nreference: tv/mc\n"
    "grid: {divergences: [tv, kl], estimators: [mc, atomic]}\nseeds: {min: 2, max: 4}\n"
    "benchmarks: [b1, b2]\ntracking: {uri: 'URI'}\n"
)
#: per row, its seeds' avg@k in points: kl/mc far below the reference, the others close
MEANS = {"tv/mc": 40.0, "tv/atomic": 40.5, "kl/mc": 20.0, "kl/atomic": 41.0}
NOISE = (0.0, 2.0, -2.0, 1.0)


def _run(store, cell, score: float) -> None:
    """A DONE run of the plan's own cell (its config hash: ``status`` counts it)."""
    rid = store.tracking.create_cell_run(
        store.exp, store.parent, store.sweep_id, cell, attempt=1,
        submission_id=submission_id(store.sweep_id, cell.id, 1),
    )  # fmt: skip
    run = CellRun(store.client, rid, eval_k=cell.eval_k)
    run.log_evaluation({"b1": 0.12, "b2": 0.12}, step=0)
    # two benchmarks 5 points either side of the run's score: their average is the score
    run.log_evaluation({"b1": (score - 5) / 100, "b2": (score + 5) / 100}, step=10)
    run.flush()
    run.finish(10)
    start = store.tracking.get_run(rid).info.start_time
    store.client.set_terminated(rid, status="FINISHED", end_time=start + 500)


def _play(store, tmp_path, extra: str = "", rounds_run: int = 99):
    """The spec, its plan, its rounds and the scores of the cells run: the rounds run as the
    launcher runs them (every cell they want, until they want no more, or ``rounds_run``)."""
    spec = tmp_path / "grid.yaml"
    spec.write_text(SPEC.replace("URI", store.uri) + extra)
    plan = load_plan(spec)
    store.sweep(plan.sweep_id)
    rounds, cells = Rounds.of_plan(plan), {c.id: c for c in plan.cells}
    scores: dict[str, float] = {}
    while rounds_run and (new := sorted(rounds.wanted(scores) - set(scores))):
        rounds_run -= 1
        for cid in new:
            cell = cells[cid]
            scores[cid] = MEANS[row_of(cell)] + NOISE[cell.seed]
            _run(store, cell, scores[cid])
    return spec, plan, rounds, scores


@pytest.fixture
def played(store, tmp_path):
    return _play(store, tmp_path)


def test_report_of_an_adaptive_sweep(store, tmp_path, played, monkeypatch):
    monkeypatch.setattr(
        "gppo.analysis.page.report_page.git_commit", lambda: "abc"
    )  # no git process
    _spec, plan, rounds, scores = played
    (stops,) = rounds.stops(scores)
    assert stops["kl/mc"].status == "separated"  # the data make the rows stop differently
    assert {s.status for s in stops.values()} >= {"separated", "futile"}
    assert len(scores) < len(plan.cells)  # some cells were not needed
    out = tmp_path / "out"
    rep = write_report(store.ref, out, plan=plan, figures=False, attach=False, formats="md,html")
    md = (out / "table1.md").read_text()
    header = _md_row(md, "Divergence")
    at, delta = header.index("Stopped"), header.index("Δ vs tv/mc (pts)")
    for label, stop in stops.items():
        row = next(r for b in rep.table.blocks for r in b.rows if r.cell == label)
        got = row.stop
        assert got is not None and (got.status, got.reason, got.seeds) == (
            stop.status, stop.reason, stop.seeds,
        )  # fmt: skip
        assert got.delta == pytest.approx(stop.delta) and got.interval == pytest.approx(
            stop.interval
        )  # the scores read back from the store, to the last bits
        lo, hi = stop.interval or (math.nan, math.nan)
        assert f"[{lo:.1f}, {hi:.1f}]" in row.delta.text()
    kl_mc = _md_row(md, "MC (DAPO)")
    assert kl_mc[at] == stops["kl/mc"].text() and kl_mc[delta].endswith("†")
    assert "no run (missing)" not in md  # the cells the rounds did not need are not missing
    # the collected scores are the launcher's (the run's avg@k over benchmarks, in points)
    got = collect(store.ref, expected=plan.cells, k=plan.spec.eval.k)
    assert cell_scores(got.runs) == pytest.approx(scores)
    assert cell_scores(pd.DataFrame()) == {}
    page = rep.page.read_text() if rep.page else ""
    lo, hi = rounds.runs_range()
    assert f"adaptive seeds 2-4: {len(scores)} runs of at most {hi}" in page
    assert "Stopped" in page and stops["kl/mc"].text() in page


def test_an_open_row_after_the_launch_is_left_by_the_budget(store, tmp_path):
    """Only the first round ran: the open rows' next seeds have no run. While the launch may
    still run them the rows are open; once it ended (with a budget), the budget left them."""
    _spec, plan, rounds, scores = _play(store, tmp_path, "budget: {runs: 8}\n", rounds_run=1)
    (stops,) = rounds.stops(scores)
    open_rows = [r for r, s in stops.items() if s.status == OPEN]
    assert open_rows
    kw = {"plan": plan, "figures": False, "attach": False, "formats": "md"}
    during = write_report(store.ref, tmp_path / "during", **kw)
    ended = write_report(store.ref, tmp_path / "ended", ended=True, **kw)
    for name in open_rows:
        label = next(r for r in during.table.blocks[0].rows if r.cell == name)
        assert label.stop is not None and label.stop.text() == f"open ({label.stop.seeds} seeds)"
        row = next(r for r in ended.table.blocks[0].rows if r.cell == name)
        assert row.stop is not None and row.stop.reason == "budget"
        assert (
            f"left by the budget at {row.stop.seeds} seeds"
            in (tmp_path / "ended" / "table1.md").read_text()
        )


def test_without_unneeded_and_label_stops(played):
    _spec, plan, rounds, scores = played
    found = label_stops(rounds, scores)
    assert set(found[0][1]) == {"tv/atomic", "kl/mc", "kl/atomic"}
    pending = pd.DataFrame(
        [{"domain": "math", "cell": "kl/mc", "seed": 3, "status": "pending", "benchmark": ""},
         {"domain": "math", "cell": "kl/mc", "seed": 0, "status": "done", "benchmark": "add"}]
    )  # fmt: skip
    kept = without_unneeded(pending, plan.cells, set(scores))
    assert kept["seed"].tolist() == [0]
    assert without_unneeded(pending, plan.cells, {c.id for c in plan.cells}).equals(pending)


def test_status_shows_unneeded_cells_and_why_each_row_stopped(played):
    from gppo.cli import app

    spec, plan, rounds, scores = played
    out = CliRunner().invoke(app, ["status", str(spec)], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    (stops,) = rounds.stops(scores)
    kl = stops["kl/mc"]
    line = f"kl/mc: separated at {kl.seeds} seeds, Δ {kl.delta:+.1f} "
    assert line in out.stdout, out.stdout
    for label, stop in stops.items():
        assert f"{label}: {stop.text()}" in out.stdout
    rows = json.loads(CliRunner().invoke(app, ["status", str(spec), "--json"]).stdout)
    states = {r["cell"]: r["state"] for r in rows}
    assert {states[c] for c in scores} == {"done"}
    unneeded = [c.id for c in plan.cells if c.id not in scores]
    assert unneeded and {states[c] for c in unneeded} == {"unneeded"}
    table_lines = [ln for ln in out.stdout.splitlines() if unneeded[0] in ln]
    assert table_lines and "unneeded" in table_lines[0] and "pending" not in out.stdout
