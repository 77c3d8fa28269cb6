"""Where a verl CPU cell's time goes: start-up, rollout, π_old, update, weight sync, checkpoints,
verl's validation, the testbed evaluator, and the rest, from finished runs in an MLflow store.

    .venv/bin/python benchmarks/bench_verl_cell.py sqlite:////path/to/mlflow.db [--cell tv-mc-s0]

Reads each finished ``backend: verl`` cell run of the store (e.g. the cross-trainer benchmark's
``runs/cross-trainer/verl/mlflow.db``, or a launch of ``configs/verl-cpu-testbed.yaml``): verl's own
per-step ``timing_s/*`` metrics (summed over steps), ``perf/testbed_eval_s`` (the yardstick), the
run's wall time (MLflow's start and end), and the machine's used memory as verl's actor samples it
each step (``actor/perf/cpu_memory_used_gb``: the whole machine, so it includes everything else that
runs). Start-up is the time from the run's start to the end of step 1 less step 1 itself. Prints
one table, each phase with its share of the wall time (the reference measured in the same run).
"""

from __future__ import annotations

import argparse
import statistics

from gppo import metrics as M

PHASES = (
    ("rollout (vLLM, agent loop, reward)", "timing_s/gen"),
    ("π_old (actor forward)", "timing_s/old_log_prob"),
    ("update (8 mini-batches)", "timing_s/update_actor"),
    ("weight sync (actor -> vLLM)", "timing_s/update_weights"),
    ("checkpoint", "timing_s/save_checkpoint"),
    ("verl validation", "timing_s/testing"),
    ("testbed evaluator (base + final)", M.PERF_TESTBED_EVAL_S),
)


def cell_costs(client, run) -> dict[str, float]:
    """Seconds per phase of one finished run, plus ``wall``, ``startup``, ``steps``, ``mem_gb``."""
    rid = run.info.run_id
    hist = {k: client.get_metric_history(rid, k) for _, k in PHASES}
    out = {name: sum(m.value for m in hist[key]) for name, key in PHASES}
    steps = client.get_metric_history(rid, "timing_s/step")
    out["wall"] = (run.info.end_time - run.info.start_time) / 1000
    out["steps"] = len(steps)
    first = min(steps, key=lambda m: m.step)
    out["startup"] = (first.timestamp - run.info.start_time) / 1000 - first.value
    out["per step"] = statistics.mean(m.value for m in steps)
    mem = client.get_metric_history(rid, "actor/perf/cpu_memory_used_gb")
    out["mem_gb"] = max((m.value for m in mem), default=float("nan"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tracking_uri")
    ap.add_argument("--cell", action="append", help="only these cell ids (default: every cell)")
    a = ap.parse_args()
    from mlflow import MlflowClient

    client = MlflowClient(a.tracking_uri)
    rows = []
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id], max_results=1000):
            tags = run.data.tags
            if tags.get(M.TAG_BACKEND) != "verl" or tags.get(M.TAG_FINISHED) != "true":
                continue
            if a.cell and tags.get(M.TAG_CELL_ID) not in a.cell:
                continue
            rows.append(cell_costs(client, run))
    if not rows:
        raise SystemExit(f"no finished verl cell runs in {a.tracking_uri}")
    mean = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
    wall = mean["wall"]
    print(f"{len(rows)} finished verl cell runs, {mean['steps']:.0f} steps each (means)\n")
    print("| phase | seconds | share of wall |\n| --- | --- | --- |")
    named = ["startup", *(name for name, _ in PHASES)]
    for name in named:
        print(f"| {name} | {mean[name]:.1f} | {mean[name] / wall:.2f} |")
    rest = wall - sum(mean[name] for name in named)
    print(f"| other (Ray job start, launcher, end of run) | {rest:.1f} | {rest / wall:.2f} |")
    print(f"| **wall (run start to end)** | **{wall:.1f}** | 1.00 |")
    print(
        f"\nper training step: {mean['per step']:.2f} s; machine memory used, peak: "
        f"{mean['mem_gb']:.1f} GiB (max over steps, whole machine)"
    )


if __name__ == "__main__":
    main()
