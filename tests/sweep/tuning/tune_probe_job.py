"""The tuner-test trial process: ``python tune_probe_job.py CELL_JSON`` (see tune_probe.py)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path


def main() -> int:
    cell = json.loads(sys.argv[1])
    s = cell["settings"]
    if s.get("fail_below_lr") is not None and s["lr"] < s["fail_below_lr"]:
        print("tune probe failing on purpose", flush=True)
        return 3
    from mlflow.tracking import MlflowClient

    from gppo import metrics as M
    from gppo.store.tracking import log_metrics, retry_locked

    q = 1.0 / (1.0 + (math.log10(s["lr"]) + 3.0) ** 2)
    q += 0.1 if cell["estimator"] == "atomic" else 0.0
    client = MlflowClient(os.environ[M.ENV_TRACKING_URI])
    run_id = os.environ[M.ENV_RUN_ID]
    k, steps = cell["eval_k"], s["steps"]
    first = True
    if s.get("marker_dir"):  # one line per start of this trial's cell (its attempts)
        marks = os.path.join(s["marker_dir"], f"{run_id}.start")
        os.makedirs(s["marker_dir"], exist_ok=True)
        first = not any(
            Path(s["marker_dir"], f).read_text() == str(s["lr"])
            for f in os.listdir(s["marker_dir"])
        )
        with open(marks, "w") as fh:
            fh.write(str(s["lr"]))
    for step in range(1, steps + 1):
        time.sleep(s["sleep_s"])
        log_metrics(client, run_id, {M.TRAIN_SCORE: q * step / steps}, step=step)
        if first and s.get("hang_after_step") == step:
            print("tune probe hanging on purpose", flush=True)
            time.sleep(3600)
    evals = {M.eval_metric(b, k): q for b in cell["benchmarks"]}
    evals[M.eval_domain_metric(k)] = q
    log_metrics(client, run_id, evals, step=steps)
    retry_locked(lambda: client.set_tag(run_id, M.TAG_FINISHED, "true"))
    print(f"tune probe done q={q:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
