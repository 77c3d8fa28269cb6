"""A local head started from a process with torch.distributed's rendezvous variables (inside
torchrun, a SLURM step, a test session holding a process group) does not hand them to its
cells: two single-process TRL cells given MASTER_PORT=29533 both bound it and failed with
EADDRINUSE (seen in CI after the verl engine tests had set it in the test process)."""

from __future__ import annotations

import sys
import time

import pytest

from gppo.sweep.cluster.connect import TORCH_RENDEZVOUS, start_local_head, stop_local_head

pytestmark = pytest.mark.slow


def test_a_local_heads_jobs_do_not_inherit_the_launchers_rank(tmp_path, monkeypatch):
    for key in TORCH_RENDEZVOUS:
        monkeypatch.setenv(key, "29533" if key == "MASTER_PORT" else "0")
    cluster = start_local_head(tmp_path / "state", num_cpus=1)
    try:
        client = cluster.client()  # with the head's auth token, when it asks for one
        code = (
            f"import os; print('seen', sorted(k for k in os.environ if k in {TORCH_RENDEZVOUS!r}))"
        )
        sid = client.submit_job(entrypoint=f'{sys.executable} -c "{code}"')
        deadline = time.monotonic() + 120
        while str(client.get_job_status(sid).value) not in ("SUCCEEDED", "FAILED", "STOPPED"):
            assert time.monotonic() < deadline, client.get_job_logs(sid)
            time.sleep(0.3)
        assert "seen []" in client.get_job_logs(sid), client.get_job_logs(sid)
    finally:
        stop_local_head(tmp_path / "state")
