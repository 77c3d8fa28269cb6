"""Reports of a sweep with axes (gppo/analysis/axes.py, axes_report.py, response.py) from tidy
CSVs with axis columns: a Table 1 per point with one correction over every comparison, the
CSV's axis columns, the rank-stability summary, each cell at its best point, the page."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gppo.analysis import stats as S
from gppo.analysis.axes import at_point, best_point, point_tables, rank_summary
from gppo.analysis.report import write_report_from_csv
from gppo.analysis.table import build_table1
from gppo.analysis.tidy import ReportInputError, read_scores_csv

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


def test_a_table_per_point_with_one_correction_over_every_comparison(tmp_path):
    effect = {(c, r): (0.1 if c == "kl/atomic" else 0.0) for c in CELLS for r in (0.7, 0.8, 0.9)}
    tidy = read_scores_csv(_csv(_tidy(effect), tmp_path))
    tables = point_tables(tidy, reference="tv/mc")
    assert [pt.point for pt in tables] == [{R: 0.7}, {R: 0.8}, {R: 0.9}]
    assert all(pt.still == ["gspo"] for pt in tables)
    # each point's Table 1 is the one of the runs at that point (gspo's runs at every point)
    alone = build_table1(at_point(tidy, {R: 0.8}), reference="tv/mc")
    rows = {r.cell: r for r in tables[1].table.blocks[0].rows}
    for row in alone.blocks[0].rows:
        assert rows[row.cell].entries == row.entries and rows[row.cell].p_value == row.p_value
    # one family: BH over every tested row of the three tables
    tested = [r for pt in tables for r in pt.table.blocks[0].rows if r.p_value is not None]
    expected = S.adjust([r.p_value for r in tested], "bh")
    assert [r.p_adjusted for r in tested] == pytest.approx(list(expected))
    assert len(tested) == 3 * 3  # kl/atomic, kl/mc and gspo at each point


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
    assert {"response.png", "rank_stability.md", "report.html"} <= names
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
