"""Cost of axes: ``plan`` and ``report`` of the quick start's grid with an axis, at two sizes.

Usage: ``python benchmarks/bench_axes.py [--dir DIR]``

Specs (configs/quickstart.yaml with ``axes:``):

- ``r_min x 3``: the radius study, ``calibration.r_min: [0.7, 0.8, 0.9]`` (123 runs: the five
  baselines are not moved by r_min and run once); ``r_min x 30``: 30 radii (1,095 runs);
- ``lr x 3`` / ``lr x 30``: ``local.lr`` over 3 / 30 values, which moves every cell (153 /
  1,530 runs: the issue's "150" and "1,500").

``plan``: the CLI command in this process (load, validate, expand, the table of cells and their
job commands, the axis lines; the store has no earlier runs). ``report``: ``write_report`` of a
SQLite store populated (not timed) with every run of the plan finished (tags as the launcher
writes them, avg@8 per benchmark, the base eval, the selection score, one training step), every
format and every figure. The ratio column: the large spec's time over the small one's, beside the
ratio of their runs (linear growth: the two match). Target: a report at ~150 runs <= 60 s.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
import uuid
from pathlib import Path

import yaml
from sqlalchemy import insert

from gppo import metrics as M

REPO = Path(__file__).resolve().parents[1]


def write_spec(folder: Path, name: str, axis: str, n: int) -> Path:
    spec = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    if axis == "calibration.r_min":
        values = [0.7, 0.8, 0.9] if n == 3 else [round(0.6 + 0.01 * i, 4) for i in range(n)]
    else:
        values = [1.0e-4 * (1 + i) for i in range(n)]
    spec.update(name=name, axes={axis: values}, tracking={"uri": f"sqlite:///{folder}/mlflow.db"})
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def populate(plan, seed: int = 0) -> None:
    """Every cell of ``plan`` as a finished run of its sweep (bulk inserts into MLflow's tables)."""
    from mlflow import MlflowClient
    from mlflow.store.tracking.dbmodels import models as db

    from gppo.store.tracking import cell_tags
    from gppo.store.uri import resolve_tracking_uri

    rng = random.Random(seed)
    client = MlflowClient(tracking_uri=resolve_tracking_uri(plan.spec.tracking.uri))
    exp = client.create_experiment(plan.spec.experiment)
    parent = client.create_run(
        exp,
        tags={M.TAG_ROLE: M.ROLE_SWEEP, M.TAG_SWEEP_ID: plan.sweep_id, M.TAG_SWEEP_NAME: "b"},
    ).info.run_id
    runs, tags, metrics = [], [], []
    t0 = int(time.time() * 1000)
    for i, cell in enumerate(plan.cells):
        rid = uuid.uuid4().hex
        start = t0 + i
        runs.append(
            {"run_uuid": rid, "name": cell.id, "source_type": "LOCAL", "source_name": "",
             "entry_point_name": "", "user_id": "bench", "status": "FINISHED",
             "start_time": start, "end_time": start + 60_000, "source_version": "",
             "lifecycle_stage": "active", "artifact_uri": "", "experiment_id": int(exp)}
        )  # fmt: skip
        run_tags = {
            **cell_tags(cell, attempt=1),
            M.PARENT_RUN_TAG: parent,
            M.TAG_SWEEP_ID: plan.sweep_id,
            M.TAG_FINISHED: "true",
        }
        tags += [{"key": k, "value": v, "run_uuid": rid} for k, v in run_tags.items()]
        values = {M.TRAIN_SCORE: rng.random(), M.WALL_TIME: 60.0, M.select_metric(8): rng.random()}
        for b in cell.benchmarks:
            values[M.eval_base_metric(b, 8)] = 0.2
            values[M.eval_metric(b, 8)] = rng.uniform(0.2, 0.7)
        for k, v in values.items():
            step = 0 if k.startswith("eval_base/") else 60
            row = {"key": k, "value": v, "timestamp": start, "step": step, "is_nan": False}
            metrics.append({**row, "run_uuid": rid})
    store = client._tracking_client.store  # population only
    with store.ManagedSessionMaker() as session:
        session.execute(insert(db.SqlRun), runs)
        session.execute(insert(db.SqlTag), tags)
        session.execute(insert(db.SqlMetric), metrics)
        session.execute(insert(db.SqlLatestMetric), metrics)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def measure(folder: Path, name: str, axis: str, n: int) -> tuple[int, float, float]:
    from typer.testing import CliRunner

    from gppo.analysis.report_writer import write_report
    from gppo.cli import app
    from gppo.grid.load import load_plan
    from gppo.store.records import find_sweep

    sub = folder / name
    sub.mkdir()
    spec = write_spec(sub, name, axis, n)
    result, t_plan = timed(lambda: CliRunner().invoke(app, ["plan", str(spec)]))
    assert result.exit_code == 0, result.output[-2000:]
    plan = load_plan(spec)
    populate(plan)
    ref = find_sweep(plan.sweep_id, plan.spec.tracking.uri)
    report, t_report = timed(lambda: write_report(ref, sub / "report", plan=plan, attach=False))
    assert report.axes is not None and len(report.axes.tables) == n
    return len(plan.cells), t_plan, t_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("COLUMNS", "200")
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for axis, short in (("calibration.r_min", "r_min"), ("local.lr", "lr")):
            small = measure(Path(tmp), f"{short}-3", axis, 3)
            large = measure(Path(tmp), f"{short}-30", axis, 30)
            rows.append((f"{short} x 3", *small, None))
            rows.append((f"{short} x 30", *large, small))
    print(f"{'spec':<12}{'runs':>7}{'plan s':>9}{'report s':>10}{'x runs':>8}{'x plan':>8}"
          f"{'x report':>10}")  # fmt: skip
    for name, runs, t_plan, t_report, small in rows:
        ratios = ""
        if small is not None:
            ratios = f"{runs / small[0]:>8.1f}{t_plan / small[1]:>8.1f}{t_report / small[2]:>10.1f}"
        print(f"{name:<12}{runs:>7}{t_plan:>9.2f}{t_report:>10.2f}{ratios}")
    worst = max(r[3] for r in rows if r[1] < 200)
    print(
        f"target: a report at ~150 runs <= 60 s: {'OK' if worst <= 60 else 'MISSED'} ({worst:.1f} s)"
    )


if __name__ == "__main__":
    main()
