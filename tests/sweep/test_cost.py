"""Cost (issue 47): what a run costs, the forecast at ``plan`` and the budget, without Ray.

The end-to-end launches (real Ray, SQLite MLflow) are in test_cost_launch.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gppo import metrics as M
from gppo.backends.base import get_backend
from gppo.backends.checkresult import StepTiming
from gppo.errors import SpecError
from gppo.grid import load_plan
from gppo.store.cost import Hours, Spent, attempt_cost, cost_key, resource_metrics, run_hours
from gppo.sweep.planning.budget import Keeper, budget_lines, check_budget
from gppo.sweep.planning.forecast import NONE, PREFLIGHT, STORE, forecast, status_lines
from gppo.sweep.planning.plan_summary import plan_lines

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def local_spec(tmp_path: Path, **extra) -> Path:
    spec = {
        "name": "cost",
        "backend": "local",
        "local": {"domain": "math", "steps": 10},
        "grid": {"divergences": ["tv", "kl"], "estimators": ["mc"]},
        "seeds": 2,
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db"},
        "ray": {"max_concurrent": 2, "resources": {"num_cpus": 1}},
        **extra,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def walls_of(seconds_by_steps: dict[int, list[float]], plan):
    """A ``walls`` source: comparable runs' seconds per cost key, by the cells' steps."""
    backend = get_backend(plan.spec.backend)
    keys = {
        cost_key(c, backend.job(c).resources, backend.cost_settings(c)): seconds_by_steps[
            c.settings["steps"]
        ]
        for c in plan.cells
    }
    return lambda _uri, wanted: {k: v for k, v in keys.items() if k in wanted}


# -- accounting ---------------------------------------------------------------------------------
def test_a_verl_cell_on_8_gpus_for_two_hours_is_16_gpu_hours_over_its_attempts():
    plan = load_plan(CONFIGS / "paper-math.yaml")
    job = get_backend("verl").job(plan.cells[0])
    logged = resource_metrics(job.resources)
    assert logged[M.COST_NUM_GPUS] == 8 and logged[M.COST_NODES] == 1
    first = attempt_cost(logged, 3600.0)  # a failed attempt, then its resumed retry
    both = attempt_cost({**logged, **first}, 3600.0)
    hours = run_hours(both)
    assert hours is not None
    assert (hours.gpu, hours.cpu, hours.wall_s) == (16.0, 2.0, 7200.0)


def test_a_run_without_resources_logged_has_no_cost():
    assert attempt_cost({}, 60.0) == {} and run_hours({}) is None


def test_the_cost_key_moves_with_steps_resources_and_backend_not_with_the_loss_or_lr(tmp_path):
    plan = load_plan(local_spec(tmp_path, axes={"local.steps": [10, 20], "local.lr": [1e-4, 2e-4]}))
    res = plan.cells[0].resources
    local = get_backend("local")
    keys: dict[tuple, set[str]] = {}
    for c in plan.cells:
        keys.setdefault((c.settings["steps"],), set()).add(cost_key(c, res, local.cost_settings(c)))
    assert [len(v) for v in keys.values()] == [1, 1]  # lr, loss and seed: one key per steps
    assert keys[(10,)] != keys[(20,)]
    cell = plan.cells[0]
    own = local.cost_settings(cell)
    assert cost_key(cell, res, own) != cost_key(cell, type(res)(num_cpus=1, num_gpus=1), own)


# -- forecast -----------------------------------------------------------------------------------
def test_a_steps_axis_changes_the_forecast_from_comparable_runs(tmp_path):
    plan = load_plan(local_spec(tmp_path, axes={"local.steps": [10, 20]}))
    fc = forecast(plan, walls=walls_of({10: [100.0, 120.0], 20: [200.0, 220.0, 210.0]}, plan))
    by_steps = {c.settings["steps"]: fc.cells[c.id] for c in plan.cells}
    assert by_steps[10].source.kind == by_steps[20].source.kind == STORE
    assert by_steps[10].seconds == 110.0 and by_steps[20].seconds == 210.0
    est, lo, hi = fc.total()
    runs_at = {s: sum(c.settings["steps"] == s for c in plan.cells) for s in (10, 20)}
    assert est.cpu == pytest.approx((110 * runs_at[10] + 210 * runs_at[20]) / 3600)
    assert lo.cpu < est.cpu < hi.cpu and est.gpu == 0
    wall, _, _ = fc.wall_s()
    assert wall == pytest.approx(est.wall_s / 2)  # 2 at a time
    text = "\n".join(plan_lines(plan, fc))
    assert "store: mean of 2 comparable finished runs" in text
    assert "store: mean of 3 comparable finished runs" in text


def test_without_comparable_runs_the_pre_flight_then_none(tmp_path, monkeypatch):
    plan = load_plan(local_spec(tmp_path))
    backend = type(get_backend("local"))
    monkeypatch.setattr(backend, "step_timing", lambda self, cell: StepTiming(5.0, 0.5, 10))
    fc = forecast(plan, walls=lambda _u, _k: {})
    (source,) = fc.sources
    assert source.kind == PREFLIGHT and source.mean_s == 10.0
    est, lo, hi = fc.total()
    assert est.cpu == pytest.approx(4 * 10.0 / 3600)
    assert (lo.cpu, hi.cpu) == pytest.approx((est.cpu * 0.65, est.cpu * 1.35))
    none = forecast(plan, preflight=False, walls=lambda _u, _k: {})
    assert none.sources[0].kind == NONE and none.total()[0] == Hours()
    assert plan_lines(plan, none)[-1].startswith("forecast: none")


def test_the_quick_start_forecast_counts_identical_cells_once(tmp_path):
    plan = load_plan(CONFIGS / "quickstart.yaml")
    fc = forecast(plan, walls=lambda _u, keys: {k: [36.0] for k in keys})
    assert len(plan.cells) == 51
    est, _, _ = fc.total()
    assert est.cpu == pytest.approx(48 * 36.0 / 3600) and est.gpu == 0
    line = next(ln for ln in plan_lines(plan, fc) if ln.startswith("forecast:"))
    assert "0 GPU-h" in line and "for 48 runs" in line


def test_a_price_turns_the_forecast_into_money(tmp_path):
    plan = load_plan(local_spec(tmp_path, cost={"cpu_hour": 0.5, "currency": "EUR"}))
    fc = forecast(plan, walls=lambda _u, keys: {k: [3600.0] for k in keys})
    line = next(ln for ln in plan_lines(plan, fc) if ln.startswith("forecast:"))
    assert "4.00 CPU-h" in line and "= 2.00 EUR" in line


# -- budget -------------------------------------------------------------------------------------
def test_a_budget_below_one_run_is_refused_in_one_line(tmp_path):
    plan = load_plan(local_spec(tmp_path, budget={"cpu_hours": 0.5}))
    fc = forecast(plan, walls=lambda _u, keys: {k: [3600.0] for k in keys})
    with pytest.raises(SpecError) as err:
        check_budget(plan, fc)
    text = str(err.value)
    assert "\n" not in text and err.value.exit_code == 2
    assert text.startswith(f"{plan.source}: budget.cpu_hours: 0.500 is below one run's forecast")
    ok = load_plan(local_spec(tmp_path, budget={"cpu_hours": 2.5}))
    check_budget(ok, fc)  # two runs fit: accepted
    (line,) = budget_lines(ok.spec.budget, fc)
    assert "over it" in line and "about 2 of 4 runs fit" in line


def test_the_keeper_starts_what_fits_then_counts_what_was_paid(tmp_path):
    plan = load_plan(local_spec(tmp_path, budget={"cpu_hours": 2.5}))
    fc = forecast(plan, walls=lambda _u, keys: {k: [3600.0] for k in keys})
    ids = [c.id for c in plan.cells]
    keeper = Keeper(plan.spec.budget, fc, Spent(Hours(), frozenset()))
    assert [keeper.admit(i) is None for i in ids] == [True, True, False, False]
    assert "past the budget (3.00 CPU-h > budget 2.50 CPU-h)" in keeper.left[ids[2]]
    keeper.ended(ids[0], Hours(0.25, 0, 900, 1))  # ran in a quarter of its forecast
    assert keeper.admit(ids[2]) is None and ids[2] not in keeper.left
    spent_before = Keeper(plan.spec.budget, fc, Spent(Hours(2.0, 0, 0, 2), frozenset(ids[:2])))
    assert [spent_before.admit(i) is None for i in ids[2:]] == [False, False]


def test_a_runs_budget_counts_cells_with_a_run_of_their_own(tmp_path):
    plan = load_plan(local_spec(tmp_path, budget={"runs": 3}))
    fc = forecast(plan, preflight=False, walls=lambda _u, _k: {})
    ids = [c.id for c in plan.cells]
    keeper = Keeper(plan.spec.budget, fc, Spent(Hours(), frozenset(ids[:1])))
    assert keeper.admit(ids[0]) is None  # a retry or resume: the same run
    assert [keeper.admit(i) is None for i in ids[1:]] == [True, True, False]
    assert keeper.left[ids[3]].endswith("(4 runs > budget 3 runs)")


@pytest.mark.parametrize(
    "budget, why",
    [({}, "at least one of gpu_hours, cpu_hours, runs"), ({"runs": 0}, "runs")],
)
def test_a_malformed_budget_is_one_line_naming_the_field(tmp_path, budget, why):
    with pytest.raises(SpecError) as err:
        load_plan(local_spec(tmp_path, budget=budget))
    assert "budget" in str(err.value) and why in str(err.value) and "\n" not in str(err.value)


def test_status_says_what_was_spent_and_forecasts_the_cells_not_done(tmp_path):
    plan = load_plan(local_spec(tmp_path, cost={"cpu_hour": 2.0, "currency": "EUR"}))
    fc = forecast(plan, walls=lambda _u, keys: {k: [1800.0, 1800.0] for k in keys})
    ids = [c.id for c in plan.cells]
    spent_line, left_line = status_lines(fc, Hours(0.25, 0.0, 900, 1), ids[1:], plan.spec.price)
    assert spent_line == "spent so far: 0.250 CPU-h, 0 GPU-h = 0.500 EUR (1 runs)"
    assert left_line.startswith("forecast left: 1.50 CPU-h [1.50, 1.50], 0 GPU-h = 3.00 EUR")
    assert "for 3 runs" in left_line and "wall time ≈ 45m00s" in left_line
    done = status_lines(fc, Hours(), [], None)
    assert done[-1] == "forecast left: nothing (every cell done)"
