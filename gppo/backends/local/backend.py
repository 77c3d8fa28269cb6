"""The ``local`` backend: one cell = one ``python -m gppo.backends.local --cell <json>`` job."""

from __future__ import annotations

import sys

from pydantic import BaseModel

from gppo.backends.base import Backend, Job, register_backend
from gppo.backends.local.settings import LocalSettings
from gppo.cell import Cell


@register_backend
class LocalBackend(Backend):
    """The CPU testbed: synthetic verifiable tasks, a small char-level policy, GRPO on CPU."""

    name = "local"
    settings_model = LocalSettings
    entrypoint_module = "gppo.backends.local"
    reuse_run_on_retry = False

    def default_benchmarks(self, settings: BaseModel) -> tuple[str, ...]:
        from gppo.backends.local.tasks import get_domain

        return get_domain(LocalSettings.model_validate(settings).domain).benchmark_names

    def known_benchmarks(self, settings: BaseModel) -> tuple[str, ...] | None:
        return self.default_benchmarks(settings)

    def stall_timeout_s(self, settings: BaseModel) -> float | None:
        """10 minutes between steps; before the first one, also the longest base-model build
        (``warmstart_steps`` at about 0.3 s a step on one slow core)."""
        s = LocalSettings.model_validate(settings)
        return 600.0 + 0.3 * s.warmstart_steps

    def job(self, cell: Cell) -> Job:
        argv = (sys.executable, "-m", self.entrypoint_module, "--cell", cell.to_json())
        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        return Job(argv=argv, env=env, resources=cell.resources)
