"""A real small study: Ray jobs (the sweep's head), MLflow and Optuna on SQLite in tmp_path.

6 trials, 2 in parallel, at least one pruned; the MLflow child runs, the report files and the
best grid spec are checked against the Optuna storage.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from gppo import metrics as M
from gppo.cli import app
from gppo.grid import load_plan
from gppo.store.tracking import Tracking
from gppo.sweep.tuning import load_tune_spec, open_study, run_tuning, storage_url
from gppo.sweep.tuning.jobs import TAG_TRIAL_STATE, study_sweep_id

from .conftest import spec_dict, write
from .tune_probe import quality

pytestmark = pytest.mark.slow

GOOD = {"divergence": "tv", "estimator": "atomic", "r_min": 0.8, "lr": 1e-3}
BAD = {"divergence": "kl", "estimator": "mc", "r_min": 0.8, "lr": 1e-4}


def trial_runs(tmp_path: Path, experiment: str, study: str | None = "tp") -> list:
    tracking = Tracking(f"sqlite:///{tmp_path}/mlflow.db")
    exp = tracking.experiment_id(experiment, create=False)
    flt = f"tags.`{M.TAG_ROLE}` = '{M.ROLE_TRIAL}'"
    if study is not None:
        flt += f" and tags.`{M.TAG_STUDY_NAME}` = '{study}'"
    return tracking.search(exp, flt)


def test_small_study_parallel_pruned_report(tmp_path: Path, ray_cluster) -> None:
    # the pruner waits for 2 COMPLETE trials: with 1, the second good trial (just below the
    # first) was pruned whenever the first ended before it, and then every later one, which
    # left one COMPLETE trial and no parameter importances to plot (seen once in CI)
    pruner = {"kind": "median", "n_startup_trials": 2, "n_warmup_steps": 1}
    spec_path = write(tmp_path, spec_dict(tmp_path, ray_cluster.address, tune={"pruner": pruner}))
    spec = load_tune_spec(spec_path)
    assert storage_url(spec) == f"sqlite:///{tmp_path}/optuna.db"  # beside the MLflow store
    study = open_study(spec)
    # two good trials first (both COMPLETE: nothing is pruned before two are), then clearly
    # worse ones, which start after the good ones end: the median pruner must stop one
    for params in (GOOD, {**GOOD, "lr": 1.2e-3}, BAD, {**BAD, "lr": 1.1e-4}):
        study.enqueue_trial(params)
    study = run_tuning(spec)

    trials = study.get_trials(deepcopy=False)
    states = [t.state for t in trials]
    assert TrialState.RUNNING not in states
    assert states.count(TrialState.COMPLETE) + states.count(TrialState.PRUNED) == 6
    assert states.count(TrialState.PRUNED) >= 1
    assert study.best_trial.params["estimator"] == "atomic"
    assert study.best_value == pytest.approx(quality(study.best_trial.params["lr"], "atomic"))
    # 2 in parallel: some two trials' runs overlapped in time, never more than 2 at once
    runs = {int(r.data.tags[M.TAG_TRIAL_NUMBER]): r for r in trial_runs(tmp_path, "tp")}
    assert sorted(runs) == [t.number for t in trials]
    spans = [(r.info.start_time, r.info.end_time) for r in runs.values()]
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert overlap == 2
    # the gate as Ray saw the trials' jobs (their own start and end times)
    jobs = ray_cluster.client()
    infos = [jobs.get_job_info(r.data.tags[M.TAG_RAY_JOB_ID]) for r in runs.values()]
    ray_spans = [(i.start_time, i.end_time) for i in infos]
    assert max(sum(1 for s, e in ray_spans if s <= t < e) for t, _ in ray_spans) <= 2
    for t in trials:
        run = runs[t.number]
        tags = run.data.tags
        assert tags[M.PARENT_RUN_TAG] and tags[M.TAG_SWEEP_ID] == study_sweep_id("tp")
        assert (
            tags[M.TAG_STUDY_NAME] == "tp" and tags[M.TAG_CELL_ID] == t.user_attrs["gppo.cell_id"]
        )
        assert tags[TAG_TRIAL_STATE] == t.state.name
        expected = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}[t.state.name]
        assert run.info.status == expected
        assert tags[M.TAG_SEED] == "3"  # the first base seed
        assert float(run.data.params["trial.lr"]) == pytest.approx(t.params["lr"])
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert any(max(t.intermediate_values) < 6 for t in pruned)  # stopped before the budget

    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["tune", str(spec_path), "--report", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "best trials of study tp" in result.output
    for base in ("optimization_history", "param_importances"):
        assert (out / f"{base}.html").is_file(), result.output
        assert (out / f"{base}.html").stat().st_size > 1000
        assert (out / f"{base}.png").stat().st_size > 1000
    assert (out / "plotly.min.js").exists()
    best_row = (out / "best_trials.md").read_text().splitlines()[2]
    assert best_row.startswith(f"| 1 | {study.best_trial.number} |")
    plan = load_plan(out / "best.yaml")  # a ready-to-launch grid spec: the base seeds, one cell
    assert [c.seed for c in plan.cells] == [3, 4]
    cell = plan.cells[0]
    assert (cell.divergence, cell.estimator) == (
        study.best_trial.params["divergence"],
        study.best_trial.params["estimator"],
    )
    assert cell.settings["lr"] == pytest.approx(study.best_trial.params["lr"])

    # rerunning the finished study resumes it and starts nothing new
    again = run_tuning(spec)
    assert len(again.get_trials(deepcopy=False)) == len(trials)


def test_per_cell_cli_named_metric_default_trial_and_failures(tmp_path: Path, ray_cluster) -> None:
    """`tune SPEC` with per_cell: one study per cell, each with the default configuration as
    its reference trial; a named objective metric; a trial whose job fails is FAIL, its run
    FAILED, and it does not count towards n_trials."""
    space = {"divergence": "tv", "estimator": ["mc", "atomic"], "lr": {"low": 5e-4, "high": 1e-2}}
    data = spec_dict(
        tmp_path,
        ray_cluster.address,
        tuneprobe={"steps": 2, "sleep_s": 0.0, "fail_below_lr": 6e-4},
        tune={
            "n_trials": 2,
            "pruner": {"kind": "none"},
            "objective": {"metric": "train/score"},
            "per_cell": True,
            "default_first": True,
            "space": space,
        },
    )
    path = write(tmp_path, data)
    spec = load_tune_spec(path)
    atomic = spec.model_copy(
        update={"tune": spec.tune.model_copy(update={"study": "tp.tv-atomic"})}
    )
    open_study(atomic).enqueue_trial({"r_min": 0.8, "lr": 5.5e-4})  # its job fails
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["tune", str(path), "--out", str(out)]
    )  # run, then the reports
    assert result.exit_code == 0, result.output
    assert "trial 0 failed" in result.output and "1 failed, best " in result.output
    assert "per-cell tuning" in result.output
    for cell, estimator in (("tv-mc", "mc"), ("tv-atomic", "atomic")):
        # each cell's best.yaml is a ready-to-launch spec of that cell at its study's best lr
        best = optuna.load_study(study_name=f"tp.{cell}", storage=storage_url(spec)).best_trial
        plan = load_plan(out / f"tp.{cell}" / "best.yaml")
        assert {(c.divergence, c.estimator) for c in plan.cells} == {("tv", estimator)}, cell
        lrs = [c.settings["lr"] for c in plan.cells]
        assert lrs == pytest.approx([best.params["lr"]] * len(lrs)), cell
    cells = (out / "cells.md").read_text().splitlines()
    assert cells[2].startswith("| tp.tv-mc | 2 | ") and cells[3].startswith(
        "| tp.tv-atomic | 2 | - |"
    )

    mc = {
        t.number: t
        for t in optuna.load_study(study_name="tp.tv-mc", storage=storage_url(spec)).trials
    }
    assert mc[0].user_attrs["gppo.default"] is True and mc[0].params["lr"] == 1e-3
    assert mc[0].value == pytest.approx(quality(1e-3, "mc"))  # train/score at the last step
    at = {
        t.number: t
        for t in optuna.load_study(study_name="tp.tv-atomic", storage=storage_url(spec)).trials
    }
    assert at[0].state == TrialState.FAIL and "FAILED" in at[0].user_attrs["gppo.failure"]
    assert [t.state for t in at.values()].count(TrialState.COMPLETE) == 2
    assert all(t.params.get("lr", 1) >= 5e-4 and "divergence" not in t.params for t in at.values())
    runs = {(r.data.tags[M.TAG_STUDY_NAME], int(r.data.tags[M.TAG_TRIAL_NUMBER])): r
            for r in trial_runs(tmp_path, "tp", study=None)}  # fmt: skip
    failed = runs[("tp.tv-atomic", 0)]
    assert failed.info.status == "FAILED" and M.TAG_FAILURE in failed.data.tags
    assert runs[("tp.tv-mc", 0)].data.tags[M.TAG_CELL_ID] == "tv-mc-s3"
