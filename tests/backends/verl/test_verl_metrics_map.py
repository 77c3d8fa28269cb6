"""verl's own MLflow tracker logs a run; our mirror maps it onto gppo.metrics names."""

from __future__ import annotations

import pytest

from gppo import metrics as m
from gppo.backends.cell_run import CellRun, protocol_violations
from gppo.backends.verl.metrics_map import (
    eval_name,
    mapped_points,
    mirror_run,
)

BENCH = ("aime24", "aime25", "brumo25", "smt25")


def _verl_session(monkeypatch, uri: str, run_id: str, steps: dict[int, dict[str, float]]):
    """Log ``steps`` exactly as verl's trainer does: verl.utils.tracking.Tracking + MLflow."""
    from verl.utils.tracking import Tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    tracker = Tracking(
        project_name="gppo",
        experiment_name="kl-atomic-s0",
        default_backend=["mlflow"],
        config={"trainer": {"total_training_steps": 4}, "actor": {"lr": 1e-6}},
    )
    assert "mlflow" in tracker.logger, "verl's MLflow logger did not attach to the run"
    for step, data in steps.items():
        tracker.log(data=data, step=step)
    tracker.finish()


def _val(step_scores: dict[str, float]) -> dict[str, float]:
    out = {}
    for bench, score in step_scores.items():
        out[f"val-core/{bench}/acc/mean@8"] = score
        out[f"val-aux/{bench}/acc/std@8"] = 0.1  # not ours: ignored
        out[f"val-core/{bench}/acc/maj@8/mean"] = score  # not avg@8: ignored
    return out


def _train(step: int) -> dict[str, float]:
    return {
        "critic/score/mean": 0.1 * step,
        "actor/entropy": 1.0 / step,
        "actor/pg_loss": -0.01 * step,
        "actor/approx_kl": 0.001 * step,
        "actor/ppo_kl": 99.0,  # verl's own; ours wins for a gppo cell
        "actor/clip_frac_low": 0.02,
        "actor/clip_frac/mu_lt_0.01": 0.5,
        "timing_s/step": 10.0,
    }


def test_eval_name_parses_what_verl_stores():
    assert eval_name("val-core/aime24/acc/mean_at_8") == ("aime24", 8)
    assert eval_name("val-core/apps/reward/mean_at_8") == ("apps", 8)
    assert eval_name("val-core/aime24/acc/maj_at_8/mean") is None
    assert eval_name("val-aux/aime24/acc/mean_at_8") is None


def test_mirror_of_a_verl_logged_run(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("paper-math")
    run_id = client.create_run(exp).info.run_id
    base = dict.fromkeys(BENCH, 0.1)
    # attempt 1: base eval at step 0, two training steps, then the job dies
    _verl_session(monkeypatch, uri, run_id, {0: _val(base), 1: _train(1), 2: _train(2)})
    logged = mirror_run(client, run_id, BENCH, 8)
    keys = {p.key for p in logged}
    assert m.eval_metric("aime24", 8) in keys and m.eval_domain_metric(8) in keys
    assert {m.TRAIN_SCORE, m.ENTROPY, m.POLICY_LOSS, m.APPROX_KL, m.WALL_TIME} <= keys
    assert m.train_metric("clip_frac_low") in keys
    assert m.clip_frac_bucket("mu_lt_0.01") in keys
    assert not any("maj" in k or "std" in k for k in keys)
    assert mirror_run(client, run_id, BENCH, 8) == []  # idempotent
    assert 4 not in CellRun(client, run_id, eval_k=8).evaluated_steps()
    assert m.eval_base_metric("aime24", 8) in keys  # the base model under its own name

    # attempt 2 resumes the same run (reuse_run_on_retry): steps 3-4 and the final eval
    final = {"aime24": 0.2, "aime25": 0.3, "brumo25": 0.4, "smt25": 0.5}
    _verl_session(monkeypatch, uri, run_id, {3: _train(3), 4: {**_train(4), **_val(final)}})
    logged = mirror_run(client, run_id, BENCH, 8)
    assert {p.step for p in logged} == {3, 4}
    assert 4 in CellRun(client, run_id, eval_k=8).evaluated_steps()

    hist = {
        k: {x.step: x.value for x in client.get_metric_history(run_id, k)}
        for k in (m.eval_domain_metric(8), m.eval_metric("smt25", 8), m.TRAIN_SCORE, m.APPROX_KL)
    }
    assert hist[m.eval_domain_metric(8)] == pytest.approx({0: 0.1, 4: 0.35})
    assert hist[m.eval_metric("smt25", 8)] == pytest.approx({0: 0.1, 4: 0.5})
    assert hist[m.TRAIN_SCORE] == pytest.approx({1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4})
    assert hist[m.APPROX_KL] == pytest.approx({1: 0.001, 2: 0.002, 3: 0.003, 4: 0.004})
    wall = {x.step: x.value for x in client.get_metric_history(run_id, m.WALL_TIME)}
    assert wall == pytest.approx({1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0})
    # what the shared reader expects: parse_eval_metric round-trips our eval names
    assert m.parse_eval_metric(m.eval_metric("aime24", 8)) == ("aime24", 8)


def test_domain_average_needs_every_benchmark():
    history = {
        "val-core/aime24/acc/mean_at_8": [(0, 0.2)],
        "val-core/aime25/acc/mean_at_8": [(0, 0.4), (5, 0.6)],
    }
    points = mapped_points(history, ("aime24", "aime25"), 8)
    avg = [(p.step, p.value) for p in points if p.key == m.eval_domain_metric(8)]
    assert avg == [(0, pytest.approx(0.3))]  # step 5 lacks aime24: no average


@pytest.mark.parametrize("reaches_final_eval", [True, False])
def test_entrypoint_marks_finished_only_after_final_eval(
    tmp_path, monkeypatch, all_paper_cells, reaches_final_eval
):
    """The job's entrypoint around verl's trainer: mirrors while it runs and tags the run
    finished only once the final eval is in it. Training itself needs GPUs, so a stand-in that
    logs the way verl's trainer does (verl's own Tracking into the run) replaces only that step."""
    from mlflow.tracking import MlflowClient

    import gppo.backends.verl.__main__ as entry
    from gppo.backends.base import get_backend

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("paper-math")).info.run_id
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    scores = dict.fromkeys(BENCH, 0.25)
    last = {**_train(2), **_val(scores)} if reaches_final_eval else _train(2)
    seen = []

    def stand_in(overrides):
        seen.append(overrides)
        _verl_session(monkeypatch, uri, run_id, {0: _val(scores), 1: _train(1), 2: last})

    monkeypatch.setattr(entry, "_run_verl", stand_in)
    monkeypatch.chdir(tmp_path)  # the cell's checkpoint directory is relative: the job's cwd
    cell = next(c for c in all_paper_cells["paper-math"] if c.id == "kl-atomic-s0")
    argv = list(get_backend("verl").job(cell).argv[3:])
    argv[argv.index("--total-steps") + 1] = "2"
    rc = entry.main(argv)
    assert seen == [argv[argv.index("--") + 1 :]]
    tags = client.get_run(run_id).data.tags
    if reaches_final_eval:
        assert rc == 0 and tags.get(m.TAG_FINISHED) == "true"
        assert protocol_violations(client, run_id, eval_k=8, benchmarks=BENCH, final_step=2) == []
        steps = [x.step for x in client.get_metric_history(run_id, m.eval_domain_metric(8))]
        assert sorted(steps) == [0, 2]
    else:
        assert rc == 1 and m.TAG_FINISHED not in tags
