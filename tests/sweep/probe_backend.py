"""A small real backend for the sweep tests: each cell is a real python process (probe_job.py)
that logs into its MLflow run and can be told to fail, sleep or crash."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from gppo.backends.base import Backend, Job, register_backend
from gppo.cell import Cell

PROBE_SCRIPT = str(Path(__file__).with_name("probe_job.py"))
#: the job's environment variable naming the socket a ``probe_hint`` cell tells when it returns
ENV_NOTIFY = "GPPO_PROBE_NOTIFY"


class ProbeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    domain: str = "probe"
    steps: int = 3
    sleep_s: float = 0.0  # per step
    fail_times: int = 0  # the first N attempts of the cell fail (counted in marker_dir)
    always_fail: bool = False
    no_finish: bool = False  # exit 0 without the gppo.finished tag
    hang_times: int = 0  # the first N attempts hang (alive, silent) after logging step 1
    #: like verl's entrypoint: each step logs its raw ``training/global_step`` at once and the
    #: train score one step later (the mirror); a failing attempt (``fail_times``) fails half way
    #: through, its last step never mirrored; a resumed attempt starts up for ``startup_s``,
    #: mirroring the last attempt's step half way through, then continues past the run's steps
    mirror_lag: bool = False
    startup_s: float = 0.0
    marker_dir: str | None = None  # attempts and start/end times are written here
    #: the first N attempts leave a process behind: in a session of its own (outside the job's
    #: process group, like a vLLM engine or the fork server's cell), ignoring SIGTERM; its pid
    #: goes to ``<marker_dir>/<cell>.orphans``, and each attempt writes whether its
    #: predecessor's is still alive to ``<marker_dir>/<cell>.overlap``
    orphan_times: int = 0
    ignore_sigterm: bool = False  # the job's own process ignores SIGTERM
    note: str = ""  # echoed back into the run (injection tests)
    #: the final avg@k: score + score_sd x a normal draw fixed by the cell's id (adaptive seeds)
    score: float = 0.5
    #: the base model's avg@k (step 0's evaluation, ``eval_base``): an axis over it moves the base
    base_score: float = 0.1
    score_sd: float = 0.0
    #: give the job an env var Ray's runtime env refuses (not a string): Ray refuses the
    #: submission itself, the job never starts
    refused: bool = False
    #: 401 or 403: the job ends as a cell does whose node the tracking server refuses (its one
    #: line, exit 1: gppo.store.health.exit_if_refused), as user ``node_user`` for a 403
    node_refused: int = 0
    node_user: str = "node"


@register_backend
class ProbeBackend(Backend):
    name = "probe"
    settings_model = ProbeSettings
    entrypoint_module = "sweep.probe_job"  # run as its script (tests/ is not a package)

    def default_benchmarks(self, settings: BaseModel) -> tuple[str, ...]:
        return ("b1",)

    def known_benchmarks(self, settings: BaseModel) -> tuple[str, ...]:
        return ("b1", "b2")

    def job(self, cell: Cell) -> Job:
        env = {"GPPO_PROBE_REFUSED": 1} if cell.settings.get("refused") else {}
        return Job(
            argv=(sys.executable, PROBE_SCRIPT, cell.to_json()), env=env, resources=cell.resources
        )


@register_backend
class ProbeReuseBackend(ProbeBackend):
    """Like verl: a retried attempt resumes the same MLflow run."""

    name = "probe_reuse"
    reuse_run_on_retry = True


@register_backend
class ProbeHintBackend(ProbeBackend):
    """Like the local backend's fork server: a cell tells the launcher when it returns (the fork
    server's own notification socket, :func:`gppo.backends.local.forkserver_manager.notified`)."""

    name = "probe_hint"

    @contextlib.contextmanager
    def serving(
        self, *, on_this_machine: bool, on_job_end: Callable[[], None] | None = None
    ) -> Iterator[Callable[[Job], Job]]:
        from gppo.backends.local.forkserver_manager import notified

        folder = tempfile.mkdtemp(prefix="gppo-probe-hint-")
        with notified(os.path.join(folder, "ended.sock"), on_job_end) as path:
            yield lambda job: dataclasses.replace(job, env={**job.env, ENV_NOTIFY: path or ""})
