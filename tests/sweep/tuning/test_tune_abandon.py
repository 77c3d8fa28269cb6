"""A tuner that ends with its store away never drops a trial silently: a trial it could not
fail stays RUNNING (the next tuner recovers it as stale) and the tuner says so, in its log and on
its progress line; a job it could not stop is named in the log too."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

from gppo.sweep.tuning import attrs, load_tune_spec
from gppo.sweep.tuning.runner import Tuner

ROOT = Path(__file__).resolve().parents[3]


class _AwayTrial:
    number = 7

    def set_user_attr(self, key: str, value: object) -> None:
        raise ConnectionError("the study's store is away")


class _AwayDispatcher:
    def stop(self, job_id: str, wait_s: float) -> None:
        raise ConnectionError("the cluster is away")


def test_a_trial_the_tuner_cannot_fail_is_said_not_dropped(caplog) -> None:
    tuner = Tuner(load_tune_spec(ROOT / "configs" / "tune-quickstart.yaml"))
    said: list[str] = []
    tuner.progress = SimpleNamespace(event=said.append)
    tuner.disp = _AwayDispatcher()
    tuner.active = {7: SimpleNamespace(trial=_AwayTrial(), run_id="r1", job_id="gppo-job-7")}
    with caplog.at_level(logging.WARNING, logger="gppo.sweep.tuning.runner"):
        tuner._abandon("the tuner was interrupted")
    text = caplog.text
    assert "could not stop trial job gppo-job-7" in text and "the cluster is away" in text
    assert "could not fail trial 7 (the tuner was interrupted)" in text
    assert "the next tuner recovers it" in text and "store is away" in text
    assert said == ["trial 7 left RUNNING: its store is away"]
    assert tuner.active == {}


def test_a_told_trial_whose_run_end_is_retried_keeps_the_tuner_going() -> None:
    """Found in CI (a basic-auth MLflow server slow under load): ``study.tell`` succeeded, ending
    the trial's run raised, so the trial stayed active for the poll to retry that end; the next
    heartbeat set an attr on the finished trial and Optuna's UpdateFinishedTrialError ended the
    study. The heartbeat and a later failure note now pass over a told trial."""
    import optuna

    tuner = Tuner(load_tune_spec(ROOT / "configs" / "tune-quickstart.yaml"))
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    study.tell(trial.number, 0.5)
    tuner.study = study
    tuner.active = {trial.number: SimpleNamespace(trial=trial, run_id="", job_id="")}
    tuner._last_beat = 0.0
    tuner._heartbeat()
    tuner.fail(trial, "its job failed after all")  # told already: the note is not set
    (told,) = study.get_trials()
    assert told.state == optuna.trial.TrialState.COMPLETE and told.value == 0.5
    assert attrs.HEARTBEAT not in told.user_attrs and attrs.FAILURE not in told.user_attrs
