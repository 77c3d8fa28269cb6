"""The probe cell process: ``python probe_job.py CELL_JSON`` (see probe_backend.py)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


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
    failing = s.get("always_fail") or attempt <= s.get("fail_times", 0)
    if failing and not s.get("mirror_lag"):
        print("probe failing on purpose", flush=True)
        return 3
    from mlflow.tracking import MlflowClient

    from gppo import metrics as M
    from gppo.store.tracking import log_metrics, retry_locked

    client = MlflowClient(os.environ[M.ENV_TRACKING_URI])
    run_id = os.environ[M.ENV_RUN_ID]
    # the process's own span, recorded in its run (concurrency tests)
    retry_locked(lambda: client.set_tag(run_id, "probe.start", repr(started)))
    k = cell["eval_k"]
    evals = {M.eval_metric(b, k): 0.1 for b in cell["benchmarks"]} | {M.eval_domain_metric(k): 0.1}
    log_metrics(client, run_id, evals, step=0)
    if s.get("mirror_lag"):
        return _lagging_mirror(client, run_id, s, failing, evals)
    for step in range(1, s["steps"] + 1):
        time.sleep(s.get("sleep_s", 0.0))
        log_metrics(client, run_id, {M.TRAIN_SCORE: step / 10, M.ENTROPY: 1.0}, step=step)
        if step == 1 and attempt <= s.get("hang_times", 0):
            print("probe hanging on purpose", flush=True)
            time.sleep(90)  # a hung engine: alive, logging nothing (longer than any test waits)
    evals = {key: 0.5 for key in evals}
    log_metrics(client, run_id, evals, step=s["steps"])
    retry_locked(lambda: client.set_tag(run_id, "probe.note", s.get("note", "")))
    if not s.get("no_finish"):
        retry_locked(lambda: client.set_tag(run_id, M.TAG_FINISHED, "true"))
    retry_locked(lambda: client.set_tag(run_id, "probe.end", repr(time.time())))
    if marker is not None:
        with open(marker / f"{cell['id']}.times", "a") as fh:
            fh.write(f"end {time.time()} {os.getpid()}\n")
    print("probe done", flush=True)
    if os.environ.get("GPPO_PROBE_NOTIFY"):  # the probe_hint backend: say the cell returned
        from gppo.backends.local.forkserver import notify_cell_end

        notify_cell_end(os.environ["GPPO_PROBE_NOTIFY"])
    return 0


def _lagging_mirror(client, run_id: str, s: dict, failing: bool, evals: dict) -> int:
    """verl under its entrypoint: raw steps at once, the train score one step behind."""
    from gppo import metrics as M
    from gppo.store.tracking import log_metrics, retry_locked

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
    log_metrics(client, run_id, {key: 0.5 for key in evals}, step=s["steps"])
    retry_locked(lambda: client.set_tag(run_id, M.TAG_FINISHED, "true"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
