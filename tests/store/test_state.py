"""The one derivation of a cell's state (gppo.store.state), row by row of its table, without
Ray or MLflow: runs are built from MLflow's own entity classes."""

from __future__ import annotations

import json

import pytest
from mlflow.entities import Run, RunData, RunInfo, RunTag

from gppo import metrics as M
from gppo.store.state import State, cell_state, run_state

HASH, OLD = "h-now", "h-before"


def run(status: str, *, finished: bool = False, cell_hash: str = HASH, job: str = "j1") -> Run:
    tags = {M.TAG_CELL_HASH: cell_hash, M.TAG_RAY_JOB_ID: job}
    if finished:
        tags[M.TAG_FINISHED] = "true"
    info = RunInfo(
        run_id=f"r-{job}", experiment_id="1", user_id="u", status=status, start_time=0,
        end_time=None, lifecycle_stage="active",
    )  # fmt: skip
    return Run(info, RunData(tags=[RunTag(k, v) for k, v in tags.items()]))


def jobs(**status: str | None):
    """A job-status lookup over submission ids, recording what was asked."""
    asked: list[str] = []

    def lookup(sid: str) -> str | None:
        asked.append(sid)
        return status.get(sid)

    lookup.asked = asked  # type: ignore[attr-defined]
    return lookup


@pytest.mark.parametrize(
    ("runs", "job_status", "expected"),
    [
        ([], {}, State.PENDING),
        ([run("FINISHED", finished=True, cell_hash=OLD)], {}, State.PENDING),  # other settings
        ([run("FINISHED", finished=True)], {}, State.DONE),
        # the driver died after the final eval, before ending the run: the results are in
        ([run("RUNNING", finished=True)], {"j1": None}, State.DONE),
        ([run("FAILED", job="j1"), run("FINISHED", finished=True, job="j2")], {}, State.DONE),
        ([run("FINISHED", finished=True, job="j1"), run("FAILED", job="j2")], {}, State.DONE),
        ([run("RUNNING")], {"j1": "RUNNING"}, State.RUNNING),
        ([run("RUNNING")], {"j1": "PENDING"}, State.RUNNING),
        ([run("RUNNING")], {"j1": "FAILED"}, State.INTERRUPTED),
        ([run("RUNNING")], {"j1": None}, State.INTERRUPTED),  # the cluster forgot the job
        ([run("KILLED")], {}, State.STOPPED),
        ([run("FAILED")], {}, State.FAILED),
        ([run("FINISHED")], {}, State.FAILED),  # exited 0 without its final evaluation
        ([run("KILLED", finished=True)], {}, State.STOPPED),  # stopped on purpose: not a result
        ([run("FAILED", job="j1"), run("KILLED", job="j2")], {}, State.STOPPED),  # the latest
    ],
)
def test_every_row_of_the_derivation_table(runs, job_status, expected):
    lookup = jobs(**job_status)
    derived = cell_state(runs, HASH, lookup)
    assert derived.state is expected
    same = [r for r in runs if r.data.tags[M.TAG_CELL_HASH] == HASH]
    assert (derived.run is None) == (not same)
    # the cluster is asked only about a latest run still marked RUNNING, never otherwise
    asks = expected in (State.RUNNING, State.INTERRUPTED)
    assert lookup.asked == (["j1"] if asks else [])


def test_without_a_job_lookup_a_running_run_reads_as_running():
    """The report's view (no cluster): RUNNING stays RUNNING."""
    assert cell_state([run("RUNNING")], HASH).state is State.RUNNING
    assert run_state("SCHEDULED", {}) is State.RUNNING


def test_a_state_reads_back_from_the_text_it_is_written_as():
    """CLI JSON and the tidy CSV write a state as its value; reading that text gives the state."""
    for state in State:
        text = json.loads(json.dumps({"state": state}))["state"]
        assert text == f"{state}" == state.value and State(text) is state
        assert state == text  # a frame's status column compares with the state directly


def test_a_run_ended_by_the_dispatcher_derives_as_the_outcome_it_was_ended_with():
    """What the dispatcher writes when it ends a run (MLflow status, the finished tag of a DONE
    run) is read back by the one derivation as that same outcome."""
    from gppo.sweep.running.dispatcher import RUN_STATUS

    assert set(RUN_STATUS) == {State.DONE, State.FAILED, State.STOPPED}
    for outcome, status in RUN_STATUS.items():
        ended = run(status, finished=outcome is State.DONE)
        assert cell_state([ended], HASH).state is outcome
