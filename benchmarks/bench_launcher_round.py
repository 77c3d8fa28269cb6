"""The launcher's cost per round at 10, 100 and 1,000 concurrent cells.

    .venv/bin/python benchmarks/bench_launcher_round.py [--cells 10 100 1000] [--rounds 5]

One round of :class:`gppo.sweep.launch.Launcher` with every cell RUNNING is what the attempt
driver does each ``poll_s``: one status round (:meth:`AttemptDriver.poll`), the tracking server's
probe, and (every ``metrics_every_s``) the metrics round: the running cells' train scores read
from their runs (one search per 200 runs) (:meth:`Launcher._refresh_metrics`) and the stall check. Measured here:

- CPU seconds of this process per status round and per metrics round (``time.process_time``);
- requests to Ray (calls on the Jobs API client: a stub of ``JobSubmissionClient`` that answers
  from a dict, since a real head cannot hold 1,000 jobs on 2 cores) and to the tracking store
  (calls on its ``MlflowClient``: one REST request each against a tracking server; here a real
  SQLite store in a temporary folder, so the metrics round's CPU includes SQLite's own work,
  which a server would do in its own process).

For comparison, ``old Ray req`` is what the status round cost before the Jobs API's list was
used: one ``GET /api/jobs/<id>`` per running job. Ratios are against the 10-cell row.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.store.tracking import Tracking
from gppo.sweep.launch import Launcher
from gppo.sweep.running.attempts import RUNNING, AttemptDriver, CellState, Limits
from gppo.sweep.running.dispatcher import Attempt, Dispatcher
from gppo.sweep.running.outage import OutageClock


class StubJobs:
    """The Jobs API calls the dispatcher makes, answered from a dict; counts each call."""

    def __init__(self, sids: list[str]) -> None:
        self.jobs = dict.fromkeys(sids, "RUNNING")
        self.calls: Counter[str] = Counter()

    def list_jobs(self) -> list[Any]:
        self.calls["list_jobs"] += 1
        return [SimpleNamespace(submission_id=s, status=v) for s, v in self.jobs.items()]

    def get_job_status(self, sid: str) -> Any:
        self.calls["get_job_status"] += 1
        return SimpleNamespace(value=self.jobs[sid])


class Counted:
    """An MlflowClient whose public calls are counted (one REST request each on a server)."""

    def __init__(self, client: Any) -> None:
        self._client, self.calls = client, Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


def setup(n: int, root: Path) -> tuple[Launcher, dict[str, CellState], Any, StubJobs, Counted]:
    """``n`` running cells, each with a run holding a few train steps, under a Launcher."""
    spec = root / "bench.yaml"
    seeds = list(range(n))
    spec.write_text(
        "name: bench\nbackend: local\n"
        f"grid: {{divergences: [tv], estimators: [mc]}}\nseeds: {seeds}\n"
        f"tracking: {{uri: 'sqlite:///{root}/mlflow.db'}}\n"
        "retries: {stall_timeout_s: 3600}\n"
    )
    plan = load_plan(spec)
    tracking = Tracking(f"sqlite:///{root}/mlflow.db")
    tracking.init_store()
    exp = tracking.experiment_id("bench")
    cells: dict[str, CellState] = {}
    for i, cell in enumerate(plan.cells):
        run = tracking.client.create_run(exp).info.run_id
        for step in (1, 2, 3):
            tracking.client.log_metric(run, M.TRAIN_SCORE, 0.1 * step, step=step)
        st = CellState(cell, state=RUNNING, attempt=1, run_id=run)
        st.current = Attempt(cell, 1, run, f"gppo-bench-{i}-a1", status="RUNNING")
        st.progress_at = time.time()
        cells[cell.id] = st
    jobs = StubJobs([st.current.submission_id for st in cells.values()])  # type: ignore[union-attr]
    counted = Counted(tracking.client)
    tracking.client = counted
    disp = Dispatcher.__new__(Dispatcher)  # no cluster: the stub is its Jobs API client
    disp.client, disp.tracking = jobs, tracking
    launcher = Launcher(plan)
    launcher.driver = AttemptDriver(
        disp, Limits(plan.spec.retries, launcher.backend),
        cluster=OutageClock("cluster", "stub", 600.0),
    )  # fmt: skip
    return launcher, cells, SimpleNamespace(tracking=tracking, experiment_id=exp), jobs, counted


def measure(n: int, rounds: int) -> dict[str, float]:
    from gppo.store.health import tracking_unreachable

    with tempfile.TemporaryDirectory() as tmp:
        launcher, cells, ctx, jobs, counted = setup(n, Path(tmp))
        driver = launcher.driver
        jobs.calls.clear()
        counted.calls.clear()
        t0 = time.process_time()
        for _ in range(rounds):  # the status round
            driver.poll(cells.values())
            tracking_unreachable(ctx.tracking.uri)  # no request for a local store
        status_cpu = (time.process_time() - t0) / rounds
        status_ray = sum(jobs.calls.values()) / rounds
        status_trk = sum(counted.calls.values()) / rounds
        counted.calls.clear()
        t0 = time.process_time()
        for _ in range(rounds):  # the metrics round
            launcher._refresh_metrics(ctx, cells)
            driver.stop_stalled(cells.values())
        metrics_cpu = (time.process_time() - t0) / rounds
        assert all(st.step == 3 for st in cells.values())  # every run was read
        metrics_trk = sum(counted.calls.values()) / rounds
        jobs.calls.clear()
        for st in cells.values():  # the old status round: one request per running job
            driver.disp.status(st.current.submission_id)  # type: ignore[union-attr]
        old_ray = sum(jobs.calls.values())
    return {
        "status_cpu_ms": status_cpu * 1e3,
        "ray_req": status_ray,
        "old_ray_req": old_ray,
        "status_trk_req": status_trk,
        "metrics_cpu_ms": metrics_cpu * 1e3,
        "metrics_trk_req": metrics_trk,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rows = [(n, measure(n, args.rounds)) for n in args.cells]
    base = rows[0][1]
    head = (
        f"{'cells':>6} | {'status CPU ms':>13} {'x':>6} | {'Ray req':>7} {'old Ray req':>11} | "
        f"{'trk req':>7} | {'metrics CPU ms':>14} {'x':>6} | {'metrics trk req':>15} {'x':>6}"
    )
    print(head)
    print("-" * len(head))
    for n, r in rows:

        def ratio(key: str, r: dict[str, float] = r) -> str:
            return f"{r[key] / base[key]:.1f}x" if base[key] else "-"

        print(
            f"{n:>6} | {r['status_cpu_ms']:>13.2f} {ratio('status_cpu_ms'):>6} | "
            f"{r['ray_req']:>7.0f} {r['old_ray_req']:>11.0f} | {r['status_trk_req']:>7.0f} | "
            f"{r['metrics_cpu_ms']:>14.1f} {ratio('metrics_cpu_ms'):>6} | "
            f"{r['metrics_trk_req']:>15.0f} {ratio('metrics_trk_req'):>6}"
        )


if __name__ == "__main__":
    main()
