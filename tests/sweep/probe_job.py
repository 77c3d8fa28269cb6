"""The probe cell process: ``python probe_job.py CELL_JSON`` (see probe_backend.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _final_score(cell: dict, s: dict) -> float:
    """The final avg@k: ``score`` plus ``score_sd`` times a normal draw fixed by the cell's id
    (its seed included), so that a cell's score is the same in every attempt and launch."""
    import random

    return s.get("score", 0.5) + s.get("score_sd", 0.0) * random.Random(cell["id"]).gauss(0, 1)


def main() -> int:
    started = time.time()
    cell = json.loads(sys.argv[1])
    s = cell["settings"]
    marker = Path(s["marker_dir"]) if s.get("marker_dir") else None
    attempt = 1
    if marker is not None:
        marker.mkdir(parents=True, exist_ok=True)
        with open(marker / f"{cell['id']}.attempts", "a") as fh:
            fh.write("x\n")
        attempt = len((marker / f"{cell['id']}.attempts").read_text().splitlines())
        with open(marker / f"{cell['id']}.times", "a") as fh:
            fh.write(f"start {time.time()} {os.getpid()}\n")
    print(f"probe {cell['id']} attempt {attempt} note={s.get('note', '')}", flush=True)
    if s.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if marker is not None:
        _orphans(marker, cell["id"], attempt, s.get("orphan_times", 0))
    if s.get("node_refused"):  # what exit_if_refused ends a refused node's job with
        from gppo.store.health import CELL_REFUSED, refusal_error

        os.environ["MLFLOW_TRACKING_USERNAME"] = s.get("node_user", "node")
        sys.exit(f"{CELL_REFUSED} {refusal_error('http://tracking:5000', s['node_refused'])}")
    failing = s.get("always_fail") or attempt <= s.get("fail_times", 0)
    if failing and not s.get("mirror_lag"):
        print("probe failing on purpose", flush=True)
        return 3

    from gppo.backends.cell_run import CellRun
    from gppo.store.tracking import retry_locked

    run = CellRun.attach(eval_k=cell["eval_k"], benchmarks=cell["benchmarks"])
    client, run_id = run.client, run.run_id
    # the process's own span, recorded in its run (concurrency tests)
    retry_locked(lambda: client.set_tag(run_id, "probe.start", repr(started)))
    run.log_evaluation(dict.fromkeys(cell["benchmarks"], s.get("base_score", 0.1)), 0)
    if s.get("mirror_lag"):
        return _lagging_mirror(run, s, failing)
    for step in range(1, s["steps"] + 1):
        time.sleep(s.get("sleep_s", 0.0))
        run.log_train_step(step, {"score": step / 10, "entropy": 1.0})
        run.flush()
        if step == 1 and attempt <= s.get("hang_times", 0):
            print("probe hanging on purpose", flush=True)
            time.sleep(90)  # a hung engine: alive, logging nothing (longer than any test waits)
    run.log_evaluation(dict.fromkeys(cell["benchmarks"], _final_score(cell, s)), s["steps"])
    retry_locked(lambda: client.set_tag(run_id, "probe.note", s.get("note", "")))
    if not s.get("no_finish"):
        run.finish(s["steps"])
    retry_locked(lambda: client.set_tag(run_id, "probe.end", repr(time.time())))
    if marker is not None:
        with open(marker / f"{cell['id']}.times", "a") as fh:
            fh.write(f"end {time.time()} {os.getpid()}\n")
    print("probe done", flush=True)
    if os.environ.get("GPPO_PROBE_NOTIFY"):  # the probe_hint backend: say the cell returned
        from gppo.backends.local.forkserver import notify_cell_end

        notify_cell_end(os.environ["GPPO_PROBE_NOTIFY"])
    return 0


def _orphans(marker: Path, cell_id: str, attempt: int, times: int) -> None:
    """Say whether the previous attempt's orphan lives; leave one of our own if asked."""
    import psutil

    pids = marker / f"{cell_id}.orphans"
    known = [int(x) for x in pids.read_text().split()] if pids.exists() else []
    alive = [p for p in known if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    with open(marker / f"{cell_id}.overlap", "a") as fh:
        fh.write(f"attempt {attempt} alive {len(alive)}\n")
    if attempt <= times:
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        with open(pids, "a") as fh:
            fh.write(f"{child.pid}\n")


def _lagging_mirror(run, s: dict, failing: bool) -> int:
    """verl under its entrypoint: raw steps at once, the train score one step behind."""
    from gppo import metrics as M
    from gppo.store.tracking import log_metrics

    client, run_id = run.client, run.run_id

    raw = "training/global_step"
    done = max((int(m.step) for m in client.get_metric_history(run_id, raw)), default=0)
    if done:  # resumed: start-up, during which the mirror copies the step never mirrored
        time.sleep(s["startup_s"] / 2)
        log_metrics(client, run_id, {M.TRAIN_SCORE: done / 10}, step=done)
        time.sleep(s["startup_s"] / 2)
    last = s["steps"] // 2 if failing else s["steps"]  # a failing attempt dies half way
    for step in range(done + 1, last + 1):
        time.sleep(s.get("sleep_s", 0.0))
        log_metrics(client, run_id, {raw: float(step)}, step=step)
        if step > done + 1:
            log_metrics(client, run_id, {M.TRAIN_SCORE: (step - 1) / 10}, step=step - 1)
    if failing:
        print("probe failing on purpose", flush=True)
        return 3
    log_metrics(client, run_id, {M.TRAIN_SCORE: s["steps"] / 10}, step=s["steps"])
    run.log_evaluation(dict.fromkeys(run.benchmarks, 0.5), s["steps"])
    run.finish(s["steps"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
