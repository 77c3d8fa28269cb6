"""The ``local`` backend: one cell = one Ray job, ``python -m gppo.backends.local --cell <json>``;
on a local head a launch's fork server runs the cell instead, the job's process only handing it
over (:meth:`LocalBackend.serving`)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterator

from pydantic import BaseModel

from gppo.backends.base import (
    STALL_TESTBED_S,
    Backend,
    Job,
    head_cpus_for,
    held_cpus,
    register_backend,
    thread_env,
)
from gppo.backends.checkresult import StepTiming
from gppo.backends.local.settings import LocalSettings
from gppo.cell import Cell, Resources
from gppo.testbed import cpu_kernels
from gppo.testbed.settings import RL

#: every cell's environment: one OpenMP thread unless the cell sets ``num_threads`` (torch reads
#: these when it is imported; the fork server is started with them too), and the pinned kernels
#: unless the cell's ``cpu_kernels`` is natural (:mod:`gppo.testbed.cpu_kernels`)
JOB_ENV = thread_env(RL.num_threads)
#: the fork server's start environment: it imports torch once for the launch's cells, pinned
#: (the launcher's environment under it, then pinned as a cell pins its own:
#: :func:`gppo.backends.local.forkserver_manager.server_env`); a job goes to it only when its cell would
#: compute with the kernels the server reports (a natural-mode cell starts its own process)
SERVER_ENV = {**JOB_ENV, **cpu_kernels.PINNED_ENV}


@register_backend
class LocalBackend(Backend):
    """The CPU testbed: synthetic verifiable tasks, a small char-level policy, GRPO on CPU."""

    name = "local"
    settings_model = LocalSettings
    entrypoint_module = "gppo.backends.local"
    reuse_run_on_retry = False
    logs_selection_score = True  # the domain's validation prompts, disjoint from its benchmarks

    def default_benchmarks(self, settings: BaseModel) -> tuple[str, ...]:
        from gppo.testbed.tasks import get_domain

        return get_domain(LocalSettings.model_validate(settings).domain).benchmark_names

    def known_benchmarks(self, settings: BaseModel) -> tuple[str, ...] | None:
        return self.default_benchmarks(settings)

    def stall_timeout_s(self, settings: BaseModel, *, first_step: bool = False) -> float | None:
        """10 minutes between steps; before the first one, also the longest base-model build
        (``warmstart_steps`` at about 0.3 s a step on one slow core: the shipped base takes
        none, a self-built one up to ``warmstart_steps`` with its restarts)."""
        s = LocalSettings.model_validate(settings)
        return STALL_TESTBED_S + (0.3 * s.warmstart_steps if first_step else 0.0)

    def step_timing(self, cell: Cell) -> StepTiming | None:
        """A few seconds of the cell's training, evaluation and probe timed here, kept per
        settings and CPU kind (:mod:`gppo.backends.local.timing`)."""
        from gppo.backends.local.timing import step_timing

        return step_timing(cell)

    def local_head_resources(self, settings: BaseModel) -> Resources | None:
        """A cell holds a CPU per thread: a local head has at least that many, also on a
        machine with fewer cores (:func:`~gppo.backends.base.head_cpus_for`)."""
        return head_cpus_for(LocalSettings.model_validate(settings).num_threads)

    def job(self, cell: Cell) -> Job:
        """The cell's process, asking Ray for a CPU per thread it computes with (``num_threads``;
        at least the spec's ``ray.resources``): what it holds is what it costs."""
        argv = (sys.executable, "-m", self.entrypoint_module, "--cell", cell.to_json())
        s = self.settings_of(cell)
        env = {**JOB_ENV, **cpu_kernels.job_env(s.cpu_kernels)}
        return Job(argv=argv, env=env, resources=held_cpus(cell.resources, s.num_threads))

    @contextlib.contextmanager
    def serving(
        self, *, on_this_machine: bool, on_job_end: Callable[[], None] | None = None
    ) -> Iterator[Callable[[Job], Job]]:
        """On a local Ray head, one fork server per launch imports the cells' modules once and
        each job hands its cell to it (:mod:`.forkserver`; the job falls back to importing them
        itself when the server is gone); it calls ``on_job_end`` when a cell returns.
        ``GPPO_FORK_SERVER=0`` in the launcher's environment: no server."""
        from gppo.backends.local import forkserver, forkserver_manager

        if not (on_this_machine and forkserver.enabled()):
            yield lambda job: job
            return
        pinned = cpu_kernels.PINNED
        with forkserver_manager.running(
            SERVER_ENV, on_cell_end=on_job_end, kernels=pinned
        ) as server:

            def served(job: Job) -> Job:
                if not cpu_kernels.same_kernels(job.env, SERVER_ENV):
                    return job  # another mode's kernels: not the server's torch
                path = server.path()  # the first job waits for the server's imports
                if path is None or job.argv[1:3] != ("-m", self.entrypoint_module):
                    return job
                if not server.serves(job.env):  # the server's real kernels, as it reported them
                    return job
                argv = (job.argv[0], forkserver.CLIENT_SCRIPT, *job.argv[3:])
                env = {**job.env, forkserver.ENV_SOCKET: path}
                return dataclasses.replace(job, argv=argv, env=env)

            yield served
