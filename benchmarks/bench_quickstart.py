"""The quick start's wall time, per-cell time and parallel efficiency, base model cache warm or cold.

Launches ``gppo-sweep launch SPEC`` (default configs/quickstart.yaml: 51 cells, 2 at a time) from a
fresh working directory, then reads every cell's run back from the sweep's MLflow store:

- launch wall time (the launcher's, from start to exit);
- per cell: job wall (MLflow run start to end: Ray job start, process start, imports, work),
  in-process time (``perf/total_s``) split into base model load, evaluation, rollout (sample),
  update and the rest, and CPU seconds of the whole process (``perf/cpu_s``, imports included);
- parallel efficiency = Σ job wall / (max_concurrent x launch wall): 1.0 means the concurrency
  slots were never idle; per-job overhead = job wall - in-process time;
- with ``--floor``, the floor measured in the same run: the same cells as bare
  ``python -m gppo.backends.local --cell ...`` subprocesses (each logging into its own run of a
  SQLite store, as under the launcher), ``max_concurrent`` at a time, with no Ray and no launcher;
  the ratio launch wall / floor wall is what Ray jobs, the launcher and its store cost.

    .venv/bin/python benchmarks/bench_quickstart.py [--spec configs/quickstart.yaml]
        [--cache warm|cold] [--floor] [--workdir DIR] [--json out.json]
    .venv/bin/python benchmarks/bench_quickstart.py --analyse DIR --wall SECONDS [--floor]

``--cache cold`` points GPPO_CACHE_DIR at an empty folder: the shipped base is still loaded (a
spec whose base does not ship builds it in its first cell, the others waiting for it) and the
first cell computes the base's step-0 evaluation for the others; ``warm`` uses the usual cache
(the base ensured there first, untimed).
On a shared machine wall times are inflated by other load (the load average is printed): compare
the CPU seconds per cell, which load does not inflate much.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gppo import metrics as M

sys.path.insert(0, os.path.dirname(__file__))

#: each phase's name in the table -> the metric the cell logs it under
PHASES = {
    "base_model_s": M.PERF_BASE_MODEL_S,
    "eval_s": M.PERF_EVAL_S,
    "sample_s": M.PERF_SAMPLE_S,
    "update_s": M.PERF_UPDATE_S,
}


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat, Linux)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


#: epoch seconds of the last launch's start and end (for the start-up and tail phases)
LAUNCH_EPOCHS: dict[str, float] = {}


def _launch(spec: Path, workdir: Path, env: dict[str, str]) -> float:
    exe = Path(sys.executable).with_name("gppo-sweep")
    LAUNCH_EPOCHS["start"] = time.time()
    t0 = time.perf_counter()
    with open(workdir / "launch.log", "w") as log:
        subprocess.run(
            [str(exe), "launch", str(spec)],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=log,
            check=True,
        )
    LAUNCH_EPOCHS["end"] = time.time()
    return time.perf_counter() - t0


def _floor(plan: Any, workdir: Path, env: dict[str, str]) -> float:
    """Wall time of the plan's cells as bare entrypoint subprocesses, max_concurrent at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from mlflow import MlflowClient

    from gppo.backends.base import get_backend

    uri = f"sqlite:///{workdir / 'floor.db'}"
    MlflowClient(uri).create_experiment("floor")  # tables and experiment once: creators race

    def one(cell: Any) -> None:
        job = get_backend(cell.backend).job(cell)
        argv = [*job.argv, "--tracking-uri", uri, "--experiment", "floor", "--quiet"]
        with open(workdir / f"floor-{cell.id}.log", "w") as log:
            subprocess.run(argv, env={**env, **job.env}, stdout=log, stderr=log, check=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(plan.spec.ray.max_concurrent) as pool:
        list(pool.map(one, plan.cells))
    return time.perf_counter() - t0


def analyse(workdir: Path, wall: float, max_concurrent: int) -> dict[str, object]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps, f"tags.`{M.TAG_ROLE}` = '{M.ROLE_CELL}'", max_results=5000)
    done = [r for r in runs if r.info.status == "FINISHED" and M.PERF_TOTAL_S in r.data.metrics]
    cells = []
    for r in done:
        m = r.data.metrics
        job = (r.info.end_time - r.info.start_time) / 1000.0
        rec = {"job_wall_s": job, "total_s": m[M.PERF_TOTAL_S], "cpu_s": m.get(M.PERF_CPU_S)}
        rec.update({p: m.get(name, 0.0) for p, name in PHASES.items()})
        rec["train_other_s"] = m.get(M.PERF_TRAIN_S, 0.0) - rec["sample_s"] - rec["update_s"]
        rec["overhead_s"] = job - rec["total_s"]
        rec["startup_s"] = m.get(M.PERF_STARTUP_S)  # process start -> work: imports, MLflow
        if rec["startup_s"] is not None:
            rec["ray_and_polling_s"] = rec["overhead_s"] - rec["startup_s"]
        cells.append(rec)
    if not cells:
        raise SystemExit(f"{workdir}: no finished cell run with perf metrics")

    def mean(key: str) -> float | None:
        values = [c[key] for c in cells if c.get(key) is not None]
        return statistics.fmean(values) if values else None

    built = [c for c in cells if c["base_model_s"] > 5]
    first_start = min(r.info.start_time for r in done) / 1000.0
    last_end = max(r.info.end_time for r in done) / 1000.0
    return {
        # launcher start -> first cell run created; last cell run ended -> launcher exit
        "launch_startup_s": first_start - LAUNCH_EPOCHS.get("start", float("nan")),
        "launch_tail_s": LAUNCH_EPOCHS.get("end", float("nan")) - last_end,
        "cells_finished": len(cells),
        "cell_runs": len(runs),
        "launch_wall_s": wall,
        "max_concurrent": max_concurrent,
        "per_cell_job_wall_s": mean("job_wall_s"),
        "per_cell_in_process_s": mean("total_s"),
        "per_cell_overhead_s": mean("overhead_s"),
        "per_cell_startup_s": mean("startup_s"),
        "per_cell_ray_and_polling_s": mean("ray_and_polling_s"),
        "per_cell_cpu_s": mean("cpu_s"),
        "per_cell_phases_s": {p: mean(p) for p in (*PHASES, "train_other_s")},
        "base_model_built_s": max((c["base_model_s"] for c in built), default=0.0),
        "parallel_efficiency": sum(c["job_wall_s"] for c in cells) / (max_concurrent * wall),
        "compute_efficiency": sum(c["total_s"] for c in cells) / (max_concurrent * wall),
        "cpu_s_total_cells": sum(c["cpu_s"] or 0.0 for c in cells),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(Path(__file__).parents[1] / "configs/quickstart.yaml"))
    ap.add_argument("--cache", choices=["warm", "cold"], default="warm")
    ap.add_argument("--workdir", help="fresh working directory (default: a temporary one)")
    ap.add_argument("--analyse", help="only analyse the finished run in this directory")
    ap.add_argument("--wall", type=float, help="with --analyse: the launch wall time, s")
    ap.add_argument("--json", help="write the figures as JSON here")
    ap.add_argument("--floor", action="store_true", help="also time the bare-subprocess floor")
    a = ap.parse_args()
    from gppo.grid import load_plan

    spec = Path(a.spec).resolve()
    plan = load_plan(spec)
    max_c = plan.spec.ray.max_concurrent
    load0 = os.getloadavg()
    print(f"# bench_quickstart: {spec.name}, {len(plan.cells)} cells, {max_c} at a time,")
    print(f"# cpus={os.cpu_count()}, load average at start {load0[0]:.1f} / {load0[1]:.1f}")
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)
    if a.analyse:
        workdir, wall, cache = Path(a.analyse), float(a.wall or "nan"), "as run"
    else:
        workdir = Path(a.workdir or tempfile.mkdtemp(prefix="gppo-quickstart-"))
        workdir.mkdir(parents=True, exist_ok=True)
        cache = a.cache
        if a.cache == "cold":
            env["GPPO_CACHE_DIR"] = tempfile.mkdtemp(prefix="gppo-cache-cold-")
        else:
            from _cells import ensure_base

            ensure_base(plan.cells[0].settings.get("domain", "math"), [])
        cpu0 = machine_cpu_s()
        wall = _launch(spec, workdir, env)
        launch_cpu = machine_cpu_s() - cpu0
    floor = floor_cpu = None
    if a.floor:
        if a.cache == "cold":  # the floor starts from an empty cache too
            env["GPPO_CACHE_DIR"] = tempfile.mkdtemp(prefix="gppo-cache-cold-")
        cpu0 = machine_cpu_s()
        floor = _floor(plan, workdir, env)
        floor_cpu = machine_cpu_s() - cpu0
    res = analyse(workdir, wall, max_c)
    res["floor_wall_s"] = floor
    if not a.analyse:
        res["launch_machine_cpu_s"] = launch_cpu
        res["floor_machine_cpu_s"] = floor_cpu
    res.update(cache=cache, workdir=str(workdir), load_start=load0, load_end=os.getloadavg())
    ph = res["per_cell_phases_s"]
    print(f"launch wall time           {wall:8.1f} s  (base model cache: {cache})")
    print(f"cells finished             {res['cells_finished']:8d}")
    print(f"per cell: job wall         {res['per_cell_job_wall_s']:8.1f} s")
    print(f"          in-process       {res['per_cell_in_process_s']:8.1f} s")
    print(
        f"          overhead         {res['per_cell_overhead_s']:8.1f} s  (Ray job + process start)"
    )
    if res["per_cell_startup_s"] is not None:
        print(f"            of which startup {res['per_cell_startup_s']:6.1f} s  (imports, MLflow)")
        print(f"            Ray + polling  {res['per_cell_ray_and_polling_s']:6.1f} s")
    print(f"          CPU (process)    {res['per_cell_cpu_s']:8.1f} s")
    print("          phases           " + ", ".join(f"{k} {v:.1f}" for k, v in ph.items()))
    print(f"base model build           {res['base_model_built_s']:8.1f} s")
    print(
        f"parallel efficiency        {res['parallel_efficiency']:8.2f}  (job wall / slots x wall)"
    )
    print(
        f"compute efficiency         {res['compute_efficiency']:8.2f}  (in-process / slots x wall)"
    )
    if floor is not None:
        print(
            f"floor: bare subprocesses   {floor:8.1f} s  ({max_c} at a time, no Ray, no launcher)"
        )
        print(f"launch / floor             {wall / floor:8.2f}")
    if "launch_machine_cpu_s" in res:
        print(
            f"launch: start-up / tail    {res['launch_startup_s']:5.1f} / {res['launch_tail_s']:.1f} s"
            "  (start -> first cell; last cell -> exit: report, Table 1)"
        )
        cells_cpu = res["cpu_s_total_cells"]
        print(
            f"machine CPU, launch        {res['launch_machine_cpu_s']:8.1f} s  (cells' own "
            f"{cells_cpu:.1f} s; the rest: Ray, launcher, store {res['launch_machine_cpu_s'] - cells_cpu:.1f} s)"
        )
        if floor_cpu is not None:
            print(f"machine CPU, floor         {floor_cpu:8.1f} s")
    print(f"load average at end        {res['load_end'][0]:8.1f}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
