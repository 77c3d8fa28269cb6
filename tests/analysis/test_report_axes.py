"""Reports of a sweep with axes (gppo/analysis/tables/axis_tables.py, axis_report_writer.py,
figures/axis_figure.py) from tidy CSVs with axis columns: a Table 1 per point with one correction over every comparison, the
CSV's axis columns, the rank-stability summary, each cell at its best point, the page."""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gppo.analysis.data.tidy import ReportInputError, read_scores_csv
from gppo.analysis.report_writer import write_report_from_csv
from gppo.analysis.tables.axis_tables import at_point, best_point, point_tables, rank_summary
from gppo.analysis.tables.table1 import build_table1
from gppo.stats import inference as S

R = "calibration.r_min"
LR = "local.lr"
CELLS = ("tv/mc", "kl/atomic", "kl/mc")


def _tidy(effect: dict[tuple[str, float], float], lrs=(None,), seeds=3, noise=0.02, seed=0):
    """Scores: 0.3 + effect[(cell, r)] (+ a small lr effect) + noise; gspo not moved by r."""
    rng = np.random.default_rng(seed)
    rows = []

    def add(cell, s, r, lr, base, sel=math.nan):
        for b in ("add3", "mul2"):
            score = float(np.clip(base + noise * rng.standard_normal(), 0, 1))
            rows.append(
                {"domain": "math", "cell": cell, "benchmark": b, "seed": s, "score": score,
                 R: r, LR: lr, "selection": sel}
            )  # fmt: skip

    for lr in lrs:
        for s in range(seeds):
            for (cell, r), e in effect.items():
                bump = 0.0 if lr is None else (0.05 if (cell, lr) == ("kl/mc", 2e-4) else 0.0)
                add(cell, s, r, lr, 0.3 + e + bump, sel=0.5 + e + bump * 2)
            add("gspo", s, None, lr, 0.31, sel=0.4)
    frame = pd.DataFrame(rows)
    if lrs == (None,):
        frame = frame.drop(columns=[LR, "selection"])
    return frame


def _csv(frame: pd.DataFrame, tmp_path, name="scores.csv"):
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def test_a_table_per_point_with_one_correction_per_point(tmp_path):
    """One family per axis point and domain (issue 58, the adaptive rule's too): each point's
    table is exactly the table of its runs alone, its marks corrected over its own rows; a row
    no axis moves (gspo) is one comparison in each point's family."""
    effect = {(c, r): (0.1 if c == "kl/atomic" else 0.0) for c in CELLS for r in (0.7, 0.8, 0.9)}
    tidy = read_scores_csv(_csv(_tidy(effect), tmp_path))
    tables = point_tables(tidy, reference="tv/mc")
    assert [pt.point for pt in tables] == [{R: 0.7}, {R: 0.8}, {R: 0.9}]
    assert all(pt.still == ["gspo"] for pt in tables)
    for i, point in enumerate(({R: 0.7}, {R: 0.8}, {R: 0.9})):
        alone = build_table1(at_point(tidy, point), reference="tv/mc")
        rows = {r.cell: r for r in tables[i].table.blocks[0].rows}
        for row in alone.blocks[0].rows:
            assert rows[row.cell].entries == row.entries
            assert (rows[row.cell].p_value, rows[row.cell].p_adjusted) == (
                row.p_value,
                row.p_adjusted,
            )
        tested = [r for r in tables[i].table.blocks[0].rows if r.p_value is not None]
        assert len(tested) == 3  # kl/atomic, kl/mc and gspo, once each
        expected = S.adjust([r.p_value for r in tested], "bh")
        assert [r.p_adjusted for r in tested] == pytest.approx(list(expected))
        assert tables[i].table.family == "at this axis point"


@pytest.mark.slow  # the page reads the git commit (a process)
def test_table1_csv_has_axis_columns_and_round_trips(tmp_path):
    effect = {(c, r): 0.02 * r for c in CELLS for r in (0.7, 0.9)}
    rep = write_report_from_csv(
        [_csv(_tidy(effect), tmp_path)], tmp_path / "out", reference="tv/mc"
    )
    table = pd.read_csv(tmp_path / "out" / "table1.csv")
    assert list(table.columns[:3]) == ["domain", "cell", R]
    assert sorted(table[R].unique()) == [0.7, 0.9]
    assert table[table["cell"] == "gspo"]["note"].str.contains("same runs at every point").all()
    # the tidy scores it wrote re-render to the same tables
    again = write_report_from_csv(
        [tmp_path / "out" / "scores.csv"], tmp_path / "again", reference="tv/mc"
    )
    assert (tmp_path / "again" / "table1.csv").read_text() == (
        tmp_path / "out" / "table1.csv"
    ).read_text()
    assert rep.axes is not None and again.axes is not None
    names = {p.name for p in rep.files}
    assert {"axis_response.png", "rank_stability.md", "report.html"} <= names
    page = (tmp_path / "out" / "report.html").read_text()
    assert 'id="axis-tables"' in page and 'id="rank-stability"' in page


def test_csv_without_axes_is_unchanged(tmp_path):
    frame = _tidy({(c, 0.8): 0.0 for c in CELLS}).drop(columns=[R])
    out = tmp_path / "out"
    rep = write_report_from_csv([_csv(frame, tmp_path)], out, reference="tv/mc", formats="csv")
    assert rep.axes is None
    assert (tmp_path / "out" / "table1.csv").read_text().startswith("domain,cell,add3,")


def test_bad_axis_and_selection_cells_are_one_line(tmp_path):
    frame = _tidy({(c, 0.8): 0.0 for c in CELLS})
    frame["colour"] = "red"
    with pytest.raises(ReportInputError, match=r"unknown column .colour.; allowed: .*axis columns"):
        read_scores_csv(_csv(frame, tmp_path))
    frame = _tidy({(c, 0.8): 0.0 for c in CELLS}, lrs=(1e-4,)).astype({"selection": object})
    frame.loc[0, "selection"] = "high"
    with pytest.raises(ReportInputError, match="row 2, column selection: 'high' is not a number"):
        read_scores_csv(_csv(frame, tmp_path))


def test_rank_summary_reports_only_separated_order_changes(tmp_path):
    # kl/atomic well above tv/mc at 0.7, well below at 0.9: a separated flip; kl/mc and tv/mc
    # swap by a hair (noise): not one
    effect = {
        ("tv/mc", 0.7): 0.0, ("kl/atomic", 0.7): 0.15, ("kl/mc", 0.7): 0.001,
        ("tv/mc", 0.9): 0.0, ("kl/atomic", 0.9): -0.15, ("kl/mc", 0.9): -0.001,
    }  # fmt: skip
    tidy = read_scores_csv(_csv(_tidy(effect, noise=0.01), tmp_path))
    summary = rank_summary(point_tables(tidy, reference="tv/mc"))
    assert summary.ranks.loc[("math", "kl/atomic")].tolist() == [1, 4]
    flips = "\n".join(summary.flips)
    assert "kl/atomic > tv/mc at calibration.r_min = 0.7" in flips
    assert "tv/mc > kl/atomic at calibration.r_min = 0.9" in flips
    assert "kl/mc > tv/mc" not in flips and "tv/mc > kl/mc" not in flips


def test_each_cell_at_its_best_selection_value(tmp_path):
    effect = {(c, 0.8): 0.0 for c in CELLS}
    tidy = read_scores_csv(_csv(_tidy(effect, lrs=(1e-4, 2e-4)), tmp_path))
    best = best_point(tidy, [LR], reference="tv/mc")
    assert best is not None
    runs = tidy.drop_duplicates(["cell", "seed", LR, R])
    for rec in best.chosen.to_dict("records"):
        mine = runs[runs["cell"] == rec["cell"]].groupby(LR)["selection"].mean()
        assert rec[LR] == mine.idxmax() and rec["selection"] == pytest.approx(mine.max())
        # the reported numbers are the benchmarks' of the chosen runs
        picked = best.tidy[best.tidy["cell"] == rec["cell"]]
        at = tidy[(tidy["cell"] == rec["cell"]) & (tidy[LR] == rec[LR])]
        assert sorted(picked["score"]) == sorted(at["score"])
    assert best.chosen.set_index("cell").loc["kl/mc", LR] == 2e-4


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.01, 0.99), min_size=2, max_size=4, unique=True))
def test_points_and_rows_partition_the_runs(values):
    """Every run stands at exactly the points of its axis value (or all, when not moved)."""
    effect = {(c, r): 0.0 for c in CELLS for r in values}
    with tempfile.TemporaryDirectory() as tmp:
        tidy = read_scores_csv(_csv(_tidy(effect, seeds=2), Path(tmp)))
    tables = point_tables(tidy, reference="tv/mc")
    assert len(tables) == len(values)
    for pt in tables:
        seen = {r.cell: r.n_seeds for r in pt.table.blocks[0].rows}
        assert seen == {"tv/mc": 2, "kl/atomic": 2, "kl/mc": 2, "gspo": 2}


# -- an axis that moves the base model (a real store, as the launcher and the cells write it) ----
WT = "local.warmstart_target"
BENCHES = ("add-small", "add", "sub", "add3")  # the local math domain's benchmarks
#: each point's own base (avg 26.7 and 12.2), and the trained cells' means there
BASES = {0.25: (0.30, 0.25, 0.26, 0.257), 0.1: (0.14, 0.11, 0.12, 0.118)}
TRAINED = {(0.25, "tv/mc"): 0.41, (0.25, "tv/atomic"): 0.40, (0.1, "tv/mc"): 0.27,
           (0.1, "tv/atomic"): 0.25}  # fmt: skip
SEEDS = (7, 8, 9)


def _moved_base_sweep(store, points=(0.25, 0.1), path=WT) -> None:
    """tv × {mc, atomic} at each point of ``path``, seeds 7-9; every run logs its base at step 0
    (a warmstart_target point's own, BASES; another axis: 0.25's, the base it does not move)."""
    rng = np.random.default_rng(46)
    for value in points:
        moved = value if path == WT else 0.25
        base = dict(zip(BENCHES, BASES[moved], strict=True))
        for (at, cell), mean in TRAINED.items():
            if at != moved:
                continue
            div, est = cell.split("/")
            for seed in SEEDS:
                noise = 0.01 * rng.standard_normal(len(BENCHES))
                scores = {b: float(mean + n) for b, n in zip(BENCHES, noise, strict=True)}
                store.cell("gppo", div, est, seed=seed, axes={path: value}, base=base,
                           scores=scores)  # fmt: skip


def _own_table(tidy, value):
    """The oracle: Table 1 of one point's runs with that point's base alone."""
    runs = tidy[(tidy["cell"] != "base") & (tidy[WT] == value)]
    base = [
        {"domain": "math", "cell": "base", "benchmark": b, "seed": s, "score": v, "status": "done"}
        for s in SEEDS
        for b, v in zip(BENCHES, BASES[value], strict=True)
    ]
    own = pd.concat([runs.drop(columns=[WT]), pd.DataFrame(base)], ignore_index=True)
    return build_table1(own, reference="tv/mc")


@pytest.mark.slow  # the page reads the git commit (a process)
def test_each_point_has_its_own_base_in_every_format(store, tmp_path):
    from gppo.analysis.figures.axis_figure import response_frame
    from gppo.analysis.report_writer import write_report

    _moved_base_sweep(store)
    out = tmp_path / "out"
    rep = write_report(store.ref, out, reference="tv/mc", attach=False, figures=False)
    assert rep.axes is not None
    tables = {pt.point[WT]: pt.table for pt in rep.axes.tables}
    for value, table in tables.items():
        rows = {r.cell: r for r in table.blocks[0].rows}
        oracle = {r.cell: r for r in _own_table(rep.tidy, value).blocks[0].rows}
        for cell in ("base", "tv/atomic"):  # the numbers, Δ and test against the own base
            got, want = rows[cell], oracle[cell]
            assert got.entries == want.entries and got.delta == want.delta
            assert got.p_value == pytest.approx(want.p_value)
    base_avg = {0.25: "26.7", 0.1: "12.2"}
    shown = {v: f"{a} [{a}, {a}]" for v, a in base_avg.items()}  # a base: no spread
    for value, table in tables.items():
        base_row = next(r for r in table.blocks[0].rows if r.kind == "base")
        assert str(base_row.entries["avg"].mean) == base_avg[value]
    # table1.csv: a base row per point, its own numbers and Δ (about -14.8 at 0.25)
    csv = pd.read_csv(out / "table1.csv")
    base = csv[csv["cell"] == "base"].set_index(WT)
    assert base.loc[0.25, "avg"] == 26.7 and base.loc[0.1, "avg"] == 12.2
    assert base.loc[0.25, "delta"] == pytest.approx(26.7 - 41.0, abs=0.6)
    # md, LaTeX and HTML: each point's section shows its own base's Avg., not the other's
    for ext, prefix in (("md", "### "), ("tex", "% "), ("html", "<h3>")):
        text = (out / f"table1.{ext}").read_text()
        parts = re.split(rf"{prefix}{re.escape(WT)} = ([0-9.]+)", text)[1:]
        assert len(parts) == 4, ext
        for value, section in zip(parts[::2], parts[1::2], strict=True):
            own, other = shown[float(value)], shown[0.1 if float(value) == 0.25 else 0.25]
            row = section.split("Base model", 1)[1].split("</tr>" if ext == "html" else "\n")[0]
            assert own in row and other not in section, (ext, value)
    # scores.csv: the base rows at each point with that point's scores; re-rendered the same
    scores = pd.read_csv(out / "scores.csv")
    base_scores = scores[scores["cell"] == "base"]
    for value in base_avg:
        at = base_scores[base_scores[WT] == value]
        assert len(at) == len(SEEDS) * len(BENCHES)
        assert sorted(set(at["score"])) == sorted(BASES[value])
    write_report_from_csv([out / "scores.csv"], tmp_path / "again", reference="tv/mc")
    assert (tmp_path / "again" / "table1.csv").read_text() == (out / "table1.csv").read_text()
    # the page's first Table 1 (the home point's, here the first: 0.1) has 0.1's base
    page = (out / "report.html").read_text()
    first = page.split('id="table1"')[1].split("</section>")[0]
    assert shown[0.1] in first and shown[0.25] not in first
    # the response figure: the base model at each point, its own Avg.
    recs = [r for r in response_frame(rep.axes.tables) if r["cell"] == "base"]
    assert {r[WT]: r["avg"] for r in recs} == {0.1: 12.2, 0.25: 26.7}


@pytest.mark.parametrize(
    ("path", "values", "home"),
    [(WT, [0.25, 0.1], "0.25"), (LR, [3.0e-5, 1.0e-4, 3.0e-4], "0.0001")],
    ids=["warmstart_target", "lr"],
)
def test_report_shows_the_specs_own_point_with_its_own_base(store, tmp_path, path, values, home):
    """The terminal's table (launch closes with the same) is the spec's own point, its resolved
    value (lr: the backend's default 1e-4, which the spec does not set; warmstart_target: the
    default None is no point, so the axis's first value), with that point's base."""
    from typer.testing import CliRunner

    from gppo.cli import app
    from gppo.grid.load import load_plan

    spec = tmp_path / "grid.yaml"
    spec.write_text(
        "name: demo\nbackend: local\nlocal: {domain: math}\nreference: tv/mc\n"
        "grid: {divergences: [tv], estimators: [mc, atomic]}\nseeds: [7, 8, 9]\n"
        f"tracking: {{uri: '{store.uri}'}}\naxes: {{{path}: {values}}}\n"
    )
    store.sweep(load_plan(spec).sweep_id)
    _moved_base_sweep(store, values, path)
    args = ["report", str(spec), "-o", str(tmp_path / "out"), "-f", "md", "--no-figures"]
    result = CliRunner().invoke(app, [*args, "--no-attach"])
    assert result.exit_code == 0, result.output
    assert f"Table 1 at {path} = {home}\n" in result.stdout
    base = next(ln for ln in result.stdout.splitlines() if "Base model" in ln)
    assert "26.7 [" in base and "12.2" not in result.stdout


@pytest.mark.slow  # the page reads the git commit (a process)
def test_page_says_the_notes_once_and_renders_every_summary_as_a_table(tmp_path):
    effect = {(c, r): 0.02 * r for c in CELLS for r in (0.7, 0.9)}
    frame = _tidy(effect, lrs=(1e-4, 2e-4))
    out = tmp_path / "out"
    write_report_from_csv(
        [_csv(frame, tmp_path)], out, reference="tv/mc", select=[LR], figures=False
    )
    general = "Scores are avg@k in percent"
    page = (out / "report.html").read_text()
    assert page.count(general) == 1  # under the first Table 1, not under each point's
    assert (out / "table1.html").read_text().count(general) == 1
    for section in ("rank-stability", "best-point"):
        html = page.split(f'<section id="{section}">')[1].split("</section>")[0]
        assert "<table" in html and "<pre" not in html and "|---" not in html, section
    best = page.split('<section id="best-point">')[1].split("</section>")[0]
    assert "<h3>calibration.r_min = 0.7</h3>" in best and general not in best
    ranks = page.split('<section id="rank-stability">')[1].split("</section>")[0]
    assert "<td>kl/atomic</td>" in ranks and "No pair of cells changes order" in ranks


def test_base_rows_carry_only_the_axes_that_move_the_base():
    """r_min leaves the base alone: one base row per seed stands at every point; a
    warmstart_target point's base is its own; a point none of whose runs has a base yet says
    why (running), rather than borrowing another point's."""
    from gppo.analysis.data.bases import BaseSource, base_rows

    base = {"add3": 0.3}
    src = [BaseSource("math", 0, "tv/mc", {R: r}, "done", f"t{r}", base) for r in (0.7, 0.9)]
    src.append(BaseSource("math", 0, "gspo", {}, "done", "g", base))
    rows = base_rows(src, {R: [0.7, 0.9]}, "tv/mc")
    assert [(r[R], r["score"], r["run_id"]) for r in rows] == [(None, 0.3, "t0.7")]

    moved = [
        BaseSource("math", 0, "tv/mc", {WT: 0.25}, "done", "a", {"add3": 0.27}),
        BaseSource("math", 0, "tv/atomic", {WT: 0.25}, "done", "b", {"add3": 0.27}),
        BaseSource("math", 0, "tv/mc", {WT: 0.1}, "done", "c", {"add3": 0.12}),
    ]
    rows = base_rows(moved, {WT: [0.25, 0.1]}, "tv/mc")
    assert [(r[WT], r["score"], r["run_id"]) for r in rows] == [(0.25, 0.27, "a"), (0.1, 0.12, "c")]
    running = [*moved[:2], BaseSource("math", 0, "tv/mc", {WT: 0.1}, "running", "c", {})]
    rows = base_rows(running, {WT: [0.25, 0.1]}, "tv/mc")
    assert [(r[WT], r["status"]) for r in rows] == [(0.25, "done"), (0.1, "running")]


@pytest.mark.parametrize("base_moves", [True, False])
def test_best_point_keeps_the_base_only_where_the_selection_does_not_move_it(tmp_path, base_moves):
    rows = [
        {"domain": "math", "cell": c, "benchmark": "add3", "seed": s, "score": 0.3 + 0.1 * v,
         WT: v, "selection": 0.5 + v}
        for c in ("tv/mc", "tv/atomic") for s in range(2) for v in (0.1, 0.25)
    ]  # fmt: skip
    for s in range(2):
        for v in (0.1, 0.25) if base_moves else (None,):
            rows.append({"domain": "math", "cell": "base", "benchmark": "add3", "seed": s,
                         "score": v or 0.2, WT: v})  # fmt: skip
    tidy = read_scores_csv(_csv(pd.DataFrame(rows), tmp_path))
    best = best_point(tidy, [WT], reference="tv/mc")
    assert best is not None
    cells = [r.cell for r in best.tables[0].table.blocks[0].rows]
    assert cells == (["tv/mc", "tv/atomic"] if base_moves else ["tv/mc", "tv/atomic", "base"])
