"""A failure the launcher's helpers skip is said, and only what they mean is skipped: a Ray
cluster that does not answer is named in the log (status and logs go on without job states),
while a token the cluster refuses is not swallowed; a process that is gone has no start time."""

from __future__ import annotations

import logging

import pytest

from gppo.sweep.cluster.connect import Cluster
from gppo.sweep.cluster.owner import process_started
from gppo.sweep.monitor import commands as control


def test_a_cluster_that_does_not_answer_is_named(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="gppo.sweep.monitor.commands"):
        assert control._client(Cluster(address="http://127.0.0.1:9")) is None
    assert "the Ray cluster at http://127.0.0.1:9 does not answer" in caplog.text


def test_a_refused_token_is_not_swallowed(monkeypatch) -> None:
    from ray.exceptions import AuthenticationError

    def refuse(self: Cluster) -> None:
        raise AuthenticationError("the cluster refused the token")

    monkeypatch.setattr(Cluster, "client", refuse)
    with pytest.raises(AuthenticationError):
        control._client(Cluster(address="http://127.0.0.1:9"))


def test_a_process_that_is_gone_has_no_start_time() -> None:
    assert process_started(2**22 + 12345) is None  # above Linux's largest pid
