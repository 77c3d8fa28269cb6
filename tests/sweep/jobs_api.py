"""A stand-in for Ray's Jobs API as :class:`gppo.sweep.running.dispatcher.Dispatcher` uses it, for the
tests that drive a dispatcher on a real store without Ray."""

from __future__ import annotations

import types
from typing import Any


class JobsApi:
    """Ray's Jobs API as the dispatcher uses it: every submission taken, no job known after."""

    def __init__(self) -> None:
        self.submitted: list[str] = []
        #: the end time (Unix seconds) Ray recorded for a job, by submission id
        self.ended: dict[str, float] = {}

    def submit_job(self, *, submission_id: str, **_kw: Any) -> str:
        self.submitted.append(submission_id)
        return submission_id

    def get_job_status(self, sid: str) -> Any:
        raise RuntimeError(f"job {sid} does not exist")

    def list_jobs(self) -> list[Any]:
        return []

    def get_job_logs(self, _sid: str) -> str:
        return ""

    def get_job_info(self, sid: str) -> Any:
        end = self.ended.get(sid)
        return types.SimpleNamespace(
            message="", driver_exit_code=None, end_time=None if end is None else end * 1000
        )
