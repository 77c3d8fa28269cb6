"""The launch's and the tuner's watch (gppo/sweep/running/service_watch.py): one set of rules, two wordings.

A local head that has exited ends the launch or study at once; a full store disk ends it with
:class:`StoreFull`; a store that does not answer counts on the tracking clock and gives up after
``tracking.unreachable_timeout_s``; anything else is the caller's to re-raise. Each line names the
spec and says what its holder left behind (a launch: its jobs and runs; the tuner: its trials
RUNNING). A real SQLite MLflow store; the dead head is a pid no process has.
"""

from __future__ import annotations

import errno
import os

import pytest

from gppo.errors import ClusterUnreachable, StoreFull, TrackingUnreachable
from gppo.store.tracking import Tracking
from gppo.sweep.cluster.connect import Cluster
from gppo.sweep.cluster.owner import pid_alive
from gppo.sweep.running.service_watch import LAUNCH, Left, Watch
from gppo.sweep.session import Session
from gppo.sweep.tuning.runner import LEFT as TUNER

HOLDERS = pytest.mark.parametrize("left", [LAUNCH, TUNER], ids=["launch", "tuner"])


def _dead_pid() -> int:
    pid = 4_000_000
    while pid_alive(pid):
        pid -= 1
    return pid


@pytest.fixture(scope="module")
def tracking(tmp_path_factory) -> Tracking:
    """One real SQLite store for the module (a fresh one costs seconds of schema migrations)."""
    return Tracking(f"sqlite:///{tmp_path_factory.mktemp('store')}/mlflow.db")


def _watch(
    tracking: Tracking, tmp_path, left: Left, *, pid: int | None, tracking_timeout_s: float = 60.0
) -> tuple[Watch, list[str]]:
    """A watch over a real SQLite store and a local head recorded with ``pid``; the clocks'
    events (``outage``, ``recovered``) as they come."""
    session = Session(
        sweep_id="s",
        tracking=tracking,
        experiment_id="0",
        parent_run_id="p",
        state_dir=tmp_path,
        cluster=Cluster("http://127.0.0.1:1", local=True, pid=pid),
    )
    events: list[str] = []
    on_change = lambda kind, _clock: events.append(kind)  # noqa: E731
    return Watch(session, "grid.yaml", 60.0, tracking_timeout_s, on_change, left=left), events


@HOLDERS
def test_a_local_head_that_exited_ends_it_at_once_saying_what_is_left(tracking, tmp_path, left):
    watch, _ = _watch(tracking, tmp_path, left, pid=_dead_pid())
    assert watch.head_gone()
    with pytest.raises(ClusterUnreachable) as err:
        watch.check_cluster()
    line = str(err.value)
    assert line.startswith("grid.yaml: the local Ray head this sweep started")
    assert line.endswith(left.head) and "\n" not in line


def test_a_live_head_is_not_gone(tracking, tmp_path):
    watch, _ = _watch(tracking, tmp_path, LAUNCH, pid=os.getpid())
    assert not watch.head_gone()
    watch.check_cluster()  # the cluster clock has seen no failure: nothing to raise


@HOLDERS
def test_a_full_disk_is_store_full_and_other_errors_are_the_callers(tracking, tmp_path, left):
    watch, _ = _watch(tracking, tmp_path, left, pid=None)
    with pytest.raises(StoreFull) as err:
        watch.store_error(OSError(errno.ENOSPC, "No space left on device"))
    assert str(err.value).endswith(left.disk_full)
    assert "No space left on device" in str(err.value)
    assert watch.store_error(ValueError("bad param")) is False
    assert not watch.tracking.down


@HOLDERS
def test_a_silent_store_counts_on_the_tracking_clock_then_gives_up(tracking, tmp_path, left):
    watch, events = _watch(tracking, tmp_path, left, pid=None, tracking_timeout_s=0.0)
    with pytest.raises(TrackingUnreachable) as err:
        watch.store_error(ConnectionError("Connection refused"))
    assert events == ["outage"]
    assert str(err.value).endswith(left.outage)
    assert "tracking.unreachable_timeout_s = 0" in str(err.value)

    patient, events = _watch(tracking, tmp_path, left, pid=None)
    assert patient.store_error(ConnectionError("Connection refused")) is True  # retried next round
    assert patient.tracking.down
    assert patient.tracking_answers() is True  # the SQLite store answers: recovered
    assert events == ["outage", "recovered"]
