"""A study's trials go through the launcher's attempt driver (real Ray jobs, real MLflow):

1. a trial whose job hangs (a hung engine) is stopped after ``retries.stall_timeout_s`` and
   retried under the same trial number; the study completes every trial;
2. a tracking server (``mlflow server``) away for 20 s mid-study loses no trial: the tuner says
   so (one line each way), starts and ends nothing meanwhile, and every trial completes once.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from rich.console import Console

from gppo import metrics as M
from gppo.store.tracking import Tracking
from gppo.sweep.tuning import load_tune_spec, run_tuning
from gppo.sweep.tuning.study_progress import Progress

from ..test_tracking_outage import Server, _outage_after_first_start
from .conftest import spec_dict, write

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NO_PRUNING = {"kind": "none"}
SPACE = {"divergence": "tv", "estimator": "mc", "lr": {"low": 5e-4, "high": 2e-3}}


def _trial_runs(uri: str) -> dict[int, list]:
    client = MlflowClient(uri)
    runs: dict[int, list] = {}
    for exp in client.search_experiments():
        for r in client.search_runs([exp.experiment_id], max_results=200):
            if r.data.tags.get(M.TAG_ROLE) == M.ROLE_TRIAL:
                runs.setdefault(int(r.data.tags[M.TAG_TRIAL_NUMBER]), []).append(r)
    for number in runs:
        runs[number].sort(key=lambda r: r.info.start_time)
    return runs


def test_a_stalled_trial_is_stopped_and_retried(tmp_path: Path, ray_cluster) -> None:
    data = spec_dict(
        tmp_path,
        ray_cluster.address,
        tuneprobe={
            "steps": 3, "sleep_s": 0.3, "hang_after_step": 1, "marker_dir": str(tmp_path / "m"),
        },
        # 10 s without a new step once stepping (0.3 s a step; a loaded machine's job exit can
        # take seconds); a first step gets a loaded machine's start-up
        retries={"max": 1, "backoff_s": 0.2, "stall_timeout_s": 10, "first_step_timeout_s": 90},
        tune={"n_trials": 2, "n_parallel": 2, "pruner": NO_PRUNING, "space": SPACE},
    )  # fmt: skip
    buf = io.StringIO()
    t0 = time.monotonic()
    study = run_tuning(load_tune_spec(write(tmp_path, data)), progress=Progress(Console(file=buf)))
    assert time.monotonic() - t0 < 600  # not the probe's hour-long hang
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2, buf.getvalue()
    runs = _trial_runs(f"sqlite:///{tmp_path}/mlflow.db")
    for t in trials:  # a stalled attempt, then the one that finished
        first, second = runs[t.number]
        assert first.info.status == "FAILED" and second.info.status == "FINISHED"
        failure = first.data.tags[M.TAG_FAILURE]
        assert "stalled: no new training step" in failure and "since step 1" in failure
        assert "tune probe hanging on purpose" in failure  # the log's tail comes with it
    out = buf.getvalue()
    assert out.count("stalled ") == 2 and out.count("retrying ") == 2, out


def test_a_tracking_outage_during_a_study_loses_no_trial(tmp_path: Path, ray_cluster) -> None:
    server = Server(tmp_path)
    server.start()
    try:
        data = spec_dict(
            tmp_path,
            ray_cluster.address,
            tuneprobe={"steps": 8, "sleep_s": 2.0, "marker_dir": str(tmp_path / "m")},
            tracking={"uri": server.uri},
            retries={"max": 0, "stall_timeout_s": 0},
            tune={
                "n_trials": 3, "n_parallel": 3, "pruner": NO_PRUNING, "space": SPACE,
                "storage": f"sqlite:///{tmp_path}/optuna.db",
            },
        )  # fmt: skip
        buf = io.StringIO()
        outage = _outage_after_first_start(tmp_path, server, down_s=20, glob="*.start")
        spec = load_tune_spec(write(tmp_path, data))
        study = run_tuning(spec, progress=Progress(Console(file=buf, width=200)))
        outage.join(timeout=120)
        out = buf.getvalue()
        trials = study.get_trials(deepcopy=False)
        assert [t.state for t in trials] == [TrialState.COMPLETE] * 3, out
        down = [ln for ln in out.splitlines() if " outage " in ln]
        back = [ln for ln in out.splitlines() if " recovered " in ln]
        assert len(down) == 1 and "the tracking server at" in down[0], out
        assert len(back) == 1 and "answers again after" in back[0], out
        runs = _trial_runs(server.uri)
        assert sorted(runs) == [t.number for t in trials]
        for number, mine in runs.items():  # one attempt each, all its steps logged
            assert [r.info.status for r in mine] == ["FINISHED"], number
            history = Tracking(server.uri).client.get_metric_history(
                mine[0].info.run_id, M.TRAIN_SCORE
            )
            assert sorted(m.step for m in history) == list(range(1, 9)), number
    finally:
        server.stop()
