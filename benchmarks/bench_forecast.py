"""How close ``plan``'s cost forecast (gppo/sweep/planning/forecast.py) comes to what the sweep then costs.

On the testbed: an *earlier* sweep of the spec with other seeds fills a store (or ``--earlier
DIR`` names a working directory that holds one: its ``mlflow.db``); then the spec's own sweep is
forecast twice, from the store (its comparable runs) and from the pre-flight alone (the
testbed's step timing, measured now, not the cached one), and launched in the same store; the
table puts each forecast (CPU-h with its interval, and wall time at the spec's concurrency)
beside what the sweep cost (the CPU-hours its runs logged, the launch's wall time).

Targets (issue 47): the store's forecast within ±15 % of the CPU-hours, the pre-flight's within
±35 %.

    .venv/bin/python benchmarks/bench_forecast.py [--spec configs/quickstart-1seed.yaml]
        [--earlier DIR] [--workdir DIR] [--json out.json]

The spec's ``seeds`` are the forecast sweep's; the earlier sweep runs the same cells with the
seeds after them, under the spec's name with ``-earlier``. Both sweeps run with the spec's
``max_concurrent``. On a shared, loaded machine a run's wall time (and so its CPU-hours: the CPU
it holds x its wall time) moves with the load: the store's forecast holds only as far as the load
during the earlier sweep matches the load during this one; the pre-flight is timed alone and
cannot see the load to come. The load average before and after is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gppo.backends.local.timing import cache_path
from gppo.grid import load_plan
from gppo.store.comparable import sweep_spent
from gppo.store.cost import fmt_hours
from gppo.sweep.monitor.launch_log import fmt_duration
from gppo.sweep.planning.forecast import Forecast, forecast

TARGETS = {"store": 0.15, "pre-flight": 0.35}
ROOT = Path(__file__).resolve().parents[1]


def write_spec(src: Path, out: Path, *, name: str, seeds: list[int]) -> Path:
    spec = yaml.safe_load(src.read_text())
    spec["name"], spec["seeds"] = name, seeds
    spec.setdefault("tracking", {})["uri"] = f"sqlite:///{out / 'mlflow.db'}"
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def launch(spec: Path, cwd: Path) -> float:
    """Run ``gppo-sweep launch SPEC`` there; its wall seconds."""
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "gppo.cli", "launch", str(spec)],
        cwd=cwd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    return time.monotonic() - start


def fresh_preflight(plan: Any) -> Forecast:
    """The forecast from the pre-flight alone, its step timing measured now."""
    for cell in plan.cells:  # drop the cached timing: measure on this machine, at this load
        cache_path(cell).unlink(missing_ok=True)
    return forecast(plan, walls=lambda _uri, _keys: {})


def row(name: str, fc: Forecast, cpu_h: float, wall_s: float) -> dict[str, Any]:
    est, lo, hi = fc.total()
    wall, wlo, whi = fc.wall_s()
    err = (est.cpu - cpu_h) / cpu_h
    return {
        "source": name,
        "detail": fc.sources[0].text(),
        "forecast_cpu_h": est.cpu,
        "interval": [lo.cpu, hi.cpu],
        "actual_cpu_h": cpu_h,
        "error": err,
        "target": TARGETS[name],
        "within": abs(err) <= TARGETS[name],
        "actual_in_interval": lo.cpu <= cpu_h <= hi.cpu,
        "forecast_wall_s": wall,
        "wall_interval": [wlo, whi],
        "actual_wall_s": wall_s,
        "wall_error": (wall - wall_s) / wall_s,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| source | forecast CPU-h [95 %] | actual CPU-h | error | target | within |"
        " forecast wall [interval] | actual wall | wall error |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lo, hi = r["interval"]
        wlo, whi = r["wall_interval"]
        lines.append(
            f"| {r['source']} ({r['detail']}) | {fmt_hours(r['forecast_cpu_h'])}"
            f" [{fmt_hours(lo)}, {fmt_hours(hi)}] | {fmt_hours(r['actual_cpu_h'])} |"
            f" {r['error']:+.1%} | ±{r['target']:.0%} | {'yes' if r['within'] else 'no'} |"
            f" {fmt_duration(r['forecast_wall_s'])} [{fmt_duration(wlo)}, {fmt_duration(whi)}] |"
            f" {fmt_duration(r['actual_wall_s'])} | {r['wall_error']:+.1%} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "configs" / "quickstart-1seed.yaml")
    ap.add_argument("--earlier", type=Path, help="a working dir whose mlflow.db holds it")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = args.earlier or args.workdir or Path(tempfile.mkdtemp(prefix="bench-forecast-"))
    work.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load(args.spec.read_text())
    seeds = list(range(base["seeds"])) if isinstance(base["seeds"], int) else base["seeds"]
    print(f"workdir {work}; load average before: {os.getloadavg()}", flush=True)
    if args.earlier is None:
        later = [max(seeds) + 1 + i for i in range(len(seeds))]
        earlier = write_spec(args.spec, work, name=f"{base['name']}-earlier", seeds=later)
        took = launch(earlier, work)
        print(f"earlier sweep (seeds {later}): {fmt_duration(took)}", flush=True)
    spec = write_spec(args.spec, work, name=f"{base['name']}-forecast", seeds=seeds)
    plan = load_plan(spec)
    from_store = forecast(plan, preflight=False)
    from_preflight = fresh_preflight(plan)
    took = launch(spec, work)
    spent = sweep_spent(plan.spec.tracking.uri or "", plan.sweep_id)
    rows = [
        row("store", from_store, spent.hours.cpu, took),
        row("pre-flight", from_preflight, spent.hours.cpu, took),
    ]
    print(f"the sweep: {len(plan.cells)} cells, {spent.hours.runs} runs logged a cost, "
          f"{fmt_duration(took)}; load average after: {os.getloadavg()}")  # fmt: skip
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
