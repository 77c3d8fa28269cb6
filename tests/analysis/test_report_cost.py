"""Table 1's cost column (issue 47): per row the mean per seed and the row's total, the table's
total with every run once, in every format, from MLflow's records and from a tidy CSV."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from gppo import metrics as M
from gppo.analysis.data.collect import paid_by_cell
from gppo.analysis.data.tidy import normalise, read_scores_csv
from gppo.analysis.tables.render import render
from gppo.analysis.tables.table1 import build_table1
from gppo.store.cost import Price
from gppo.store.records import RunRecord


def tidy(shared: bool = True) -> pd.DataFrame:
    """tv/mc and kl/mc, 2 seeds, 2 benchmarks; chi2/mc shows tv/mc's runs (the same run ids)
    when ``shared``; a base row carrying its source run's id."""
    rows = []
    hours = {"tv/mc": 0.01, "chi2/mc": 0.01, "kl/mc": 0.03}
    for cell, h in hours.items():
        for seed in (0, 1):
            source = "tv/mc" if shared and cell == "chi2/mc" else cell
            for bench, score in (("a", 0.3 + seed / 100), ("b", 0.4 + (cell == "kl/mc") / 10)):
                rows.append(
                    {"domain": "math", "cell": cell, "benchmark": bench, "seed": seed,
                     "score": score, "cpu_hours": h, "gpu_hours": 0.0,
                     "run_id": f"{source}-{seed}"}
                )  # fmt: skip
    rows += [
        {"domain": "math", "cell": "base", "benchmark": "a", "seed": s, "score": 0.2,
         "cpu_hours": 0.01, "gpu_hours": 0.0, "run_id": f"tv/mc-{s}"}
        for s in (0, 1)
    ]  # fmt: skip
    return normalise(pd.DataFrame(rows))


def test_each_row_has_its_mean_per_seed_and_total_and_the_table_counts_each_run_once():
    table = build_table1(tidy())
    cost = table.cost
    assert cost is not None and not cost.gpu
    assert cost.text("math", "kl/mc") == "0.0300 / 0.0600"
    assert cost.text("math", "chi2/mc") == cost.text("math", "tv/mc") == "0.0100 / 0.0200"
    assert cost.text("math", "base") == "—"  # the base model trained nothing here
    assert cost.total.cpu == pytest.approx(0.08) and cost.total.runs == 4  # tv/mc's runs once
    assert "Total: 0.0800 CPU-h, 0 GPU-h over 4 runs" in cost.note()


@pytest.mark.parametrize("fmt", ["md", "latex", "html"])
def test_the_cost_column_and_total_are_in_every_format(fmt):
    text = render(build_table1(tidy()), fmt)
    assert "Cost (CPU-h, seed / row)" in text
    assert "0.0300 / 0.0600" in text and "Total: 0.0800 CPU-h" in text


def test_table1_csv_has_the_cost_columns_and_a_total_row_in_money_with_a_price():
    csv = render(
        build_table1(tidy(), price=Price(gpu_hour=2.0, cpu_hour=0.5, currency="EUR")), "csv"
    )
    table = pd.read_csv(io.StringIO(csv)).set_index("cell")
    assert table.loc["kl/mc", "cpu_hours_per_seed"] == pytest.approx(0.03)
    assert table.loc["kl/mc", "cpu_hours"] == pytest.approx(0.06)
    assert table.loc["kl/mc", "cost"] == pytest.approx(0.03)
    assert table.loc["total", "cpu_hours"] == pytest.approx(0.08)
    assert table.loc["total", "cost"] == pytest.approx(0.04)
    assert table.loc["total", "currency"] == "EUR"
    assert pd.isna(table.loc["base", "cpu_hours"])  # the base model: no run of this table
    assert table.drop(index="total")["cpu_hours"].sum() == pytest.approx(0.08 + 0.02)  # chi2/mc


def test_a_tidy_csv_carries_the_cost_into_report_from_csv(tmp_path):
    path = tmp_path / "scores.csv"
    tidy().to_csv(path, index=False)
    again = build_table1(read_scores_csv(path))
    assert again.cost is not None
    assert again.cost.text("math", "kl/mc") == "0.0300 / 0.0600"
    assert again.cost.total.cpu == pytest.approx(0.08)
    bad = path.read_text().replace("0.03,", "lots,", 1)
    path.write_text(bad)
    with pytest.raises(ValueError, match="column cpu_hours: 'lots' is not a number"):
        read_scores_csv(path)


def test_a_table_without_costs_has_no_cost_column():
    table = build_table1(tidy().assign(cpu_hours=float("nan"), gpu_hours=float("nan")))
    assert table.cost is None and "Cost" not in render(table, "md")


def record(cell: str, attempt: int, cpu: float | None, **tags: str) -> RunRecord:
    metrics = {} if cpu is None else {M.COST_CPU_HOURS: cpu, M.COST_GPU_HOURS: 2 * cpu}
    return RunRecord(
        f"{cell}-{attempt}", "FINISHED", 0, 1,
        tags={M.TAG_CELL_ID: cell, M.TAG_ATTEMPT: str(attempt), **tags}, metrics=metrics,
    )  # fmt: skip


def test_a_cells_cost_is_every_attempt_and_a_copy_of_an_identical_cells_runs_costs_nothing():
    paid = paid_by_cell(
        [
            record("tv-mc-s0", 1, 0.2),  # failed, then retried: both were paid for
            record("tv-mc-s0", 2, 0.3),
            record("chi2-mc-s0", 1, 0.3, **{M.TAG_SAME_RUNS: "tv-mc-s0-2"}),
            record("kl-mc-s0", 1, None),  # still running: nothing logged yet
        ]
    )
    tv, chi2 = paid["tv-mc-s0"], paid["chi2-mc-s0"]
    assert tv is not None and (tv.cpu, tv.gpu) == pytest.approx((0.5, 1.0))
    assert chi2 is not None and (chi2.cpu, chi2.gpu) == (0.0, 0.0)
    assert paid["kl-mc-s0"] is None
