"""A submission the cluster refuses for its own state waits; one it refuses for the job fails.

Real local Ray and a real SQLite store; only Ray's "500: No available agent to submit job, please
try again later" (a head whose agents are not up yet) is made, by a client that answers the first
submissions with it and passes everything else to Ray's own client.
"""

from __future__ import annotations

import pytest
from helpers import cell_runs

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.sweep.cluster import connect as cluster_mod
from gppo.sweep.launch import Launcher

from .conftest import write_spec

pytestmark = pytest.mark.slow  # starts Ray jobs

BUSY = (
    "Request failed with status code 500: No available agent to submit job, please try again later."
)


class NotReadyYet:
    """Ray's Jobs client whose first ``refusals`` submissions get the head's 500."""

    def __init__(self, client, refusals: int) -> None:
        self.client, self.left, self.refused = client, refusals, 0

    def submit_job(self, **kwargs):
        if self.left > 0:
            self.left -= 1
            self.refused += 1
            raise RuntimeError(BUSY)
        return self.client.submit_job(**kwargs)

    def __getattr__(self, name):
        return getattr(self.client, name)


def test_a_cluster_not_ready_costs_no_attempt(tmp_path, ray_cluster, monkeypatch):
    made: list[NotReadyYet] = []
    real = cluster_mod.Cluster.client

    def client(self):
        made.append(NotReadyYet(real(self), refusals=4))
        return made[-1]

    monkeypatch.setattr(cluster_mod.Cluster, "client", client)
    # no retries at all: a refusal counted as an attempt would fail its cell
    spec = write_spec(tmp_path, ray_cluster.address, name="busy", retries={"max": 0})
    events: list = []
    result = Launcher(load_plan(spec), poll_s=0.3, on_event=events.append).run()
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    assert made and made[0].refused == 4
    outages = [e for e in events if e.kind in ("outage", "recovered")]
    assert [(e.kind, e.service) for e in outages] == [
        ("outage", "cluster"),
        ("recovered", "cluster"),
    ]
    assert "try again later" in outages[0].reason
    runs = cell_runs(f"sqlite:///{tmp_path}/mlflow.db").values()  # no run left for a refused try
    assert sorted((r.data.tags[M.TAG_CELL_ID], r.data.tags[M.TAG_ATTEMPT]) for r in runs) == [
        ("kl-mc-s0", "1"),
        ("tv-mc-s0", "1"),
    ]
    assert all(r.info.status == "FINISHED" for r in runs)


def test_a_job_ray_refuses_fails_its_attempt(tmp_path, ray_cluster):
    """A runtime env Ray refuses (an env var that is not a string) is the job's fault: each
    refusal is an attempt (FAILED run, ``retrying`` then ``failed``), the cluster is not down."""
    spec = write_spec(
        tmp_path, ray_cluster.address, name="refusedjob",
        overrides={"kl-mc": {"probe": {"refused": True}}},
        retries={"max": 1, "backoff_s": 0.2},
    )  # fmt: skip
    events: list = []
    result = Launcher(load_plan(spec), poll_s=0.3, on_event=events.append).run()
    assert result.cells["tv-mc-s0"].state == "done"
    assert result.cells["kl-mc-s0"].state == "failed"
    mine = [(e.kind, e.attempt) for e in events if e.cell == "kl-mc-s0"]
    assert mine == [("retrying", 1), ("failed", 2)], mine
    assert "Ray refused the submission" in events[[e.cell for e in events].index("kl-mc-s0")].reason
    assert not [e for e in events if e.kind == "outage"]
