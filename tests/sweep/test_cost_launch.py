"""Cost end to end (issue 47): real local Ray with fake GPUs, a real SQLite MLflow store, the CLI.

A budget that cuts the sweep in the middle, a relaunch with a larger one, the GPU-hours each run
logged, Table 1's cost column in table1.csv and ``status``'s spend."""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.analysis import write_report
from gppo.grid import load_plan
from gppo.store import find_sweep
from gppo.sweep.launch import Launcher
from gppo.sweep.monitor.commands import sweep_status

from .conftest import launcher_cmd, local_head, write_spec

pytestmark = pytest.mark.slow  # starts Ray and a launcher


@pytest.fixture
def gpu_cluster():
    """A local Ray head with 2 fake GPUs (logical: Ray schedules on them, nothing uses one)."""
    with local_head(num_cpus=2, num_gpus=2) as cluster:
        yield cluster


def test_a_runs_budget_cuts_the_sweep_a_larger_one_goes_on_and_gpu_hours_add_up(
    tmp_path, gpu_cluster
):
    spec = write_spec(
        tmp_path,
        gpu_cluster.address,
        name="costly",
        seeds=2,
        probe={"steps": 2, "sleep_s": 0.3},
        ray={"max_concurrent": 1, "resources": {"num_cpus": 0.5, "num_gpus": 1}},
        budget={"runs": 2},
        cost={"gpu_hour": 3.0, "currency": "USD"},
    )
    first = subprocess.run(
        [*launcher_cmd(), "launch", str(spec)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    assert "left by the budget (2 runs):" in first.stdout
    assert first.stdout.count("its forecast would take the sweep past the budget (3 runs") == 2

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs(
        [client.get_experiment_by_name("costly").experiment_id],
        f"tags.`{M.TAG_ROLE}` = '{M.ROLE_CELL}'",
    )
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
    for run in runs:  # 1 fake GPU and half a CPU, held for the run's wall time
        m = run.data.metrics
        assert m[M.COST_NUM_GPUS] == 1 and m[M.COST_NUM_CPUS] == 0.5 and m[M.COST_NODES] == 1
        assert m[M.COST_WALL_S] > 0.6  # two steps of 0.3 s at least
        assert m[M.COST_GPU_HOURS] == pytest.approx(m[M.COST_WALL_S] / 3600)
        assert m[M.COST_CPU_HOURS] == pytest.approx(0.5 * m[M.COST_WALL_S] / 3600)
        assert run.data.tags[M.TAG_COST_KEY]

    text = yaml.safe_load(spec.read_text())
    text["budget"] = {"runs": 4}
    spec.write_text(yaml.safe_dump(text))
    plan = load_plan(spec)
    second = Launcher(plan, poll_s=0.5).run()
    assert second.ok and not second.left

    rows = sweep_status(plan)
    assert [str(r.state) for r in rows] == ["done"] * 4
    spent = sum(r.gpu_hours for r in rows)
    assert spent == pytest.approx(sum(r.cpu_hours for r in rows) * 2)

    ref = find_sweep(plan.sweep_id, plan.spec.tracking.uri, experiment=plan.spec.experiment)
    write_report(ref, tmp_path / "rep", formats="csv", plan=plan, figures=False, attach=False)
    table = pd.read_csv(tmp_path / "rep" / "table1.csv").set_index("cell")
    total = table.loc["total"]
    assert total["gpu_hours"] == pytest.approx(spent, rel=1e-5)
    assert total["cost"] == pytest.approx(3.0 * spent, rel=1e-5) and total["currency"] == "USD"
    per_row = table.drop(index="total").dropna(subset=["gpu_hours"])  # the base row: no runs
    assert sorted(per_row.index) == ["kl/mc", "tv/mc"]
    assert per_row["gpu_hours"].sum() == pytest.approx(spent, rel=1e-5)
    halves = (per_row["gpu_hours"] / 2).tolist()
    assert per_row["gpu_hours_per_seed"].tolist() == pytest.approx(halves, rel=1e-5)


def test_a_group_of_identical_cells_whose_runner_the_budget_leaves_is_left_with_it(
    tmp_path, ray_cluster
):
    # kl/mc runs first (plan order) and is the one run the budget allows; tv/mc would be the
    # second, and chi2/mc is the same function as tv/mc: it waits on tv/mc's run, so it is left too
    spec = write_spec(
        tmp_path, ray_cluster.address, name="left", budget={"runs": 1},
        grid={"divergences": ["kl", "tv", "chi2"], "estimators": ["mc"]},
    )  # fmt: skip
    result = Launcher(load_plan(spec), poll_s=0.5).run()
    assert result.ok and str(result.cells["kl-mc-s0"].state) == "done"
    assert sorted(result.left) == ["chi2-mc-s0", "tv-mc-s0"]
    assert result.left["chi2-mc-s0"].startswith("its runs' cell tv-mc-s0 was left: its forecast")
