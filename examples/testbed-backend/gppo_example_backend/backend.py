"""The spec side of the ``example`` backend: its settings section and one cell's Ray job."""

from __future__ import annotations

import sys

from pydantic import BaseModel, ConfigDict, Field

from gppo.backends.base import Backend, Job
from gppo.cell import Cell
from gppo.testbed.settings import RL
from gppo.testbed.tasks import get_domain


class ExampleSettings(BaseModel):
    """The ``example:`` section of a spec (unknown keys are refused). Defaults: the testbed's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: str = "math"
    #: a base of the testbed's family (docs/testbed.md); None: the domain's default base
    warmstart_target: float | None = Field(None, gt=0, le=1)
    steps: int = Field(RL.steps, ge=1)
    prompts_per_step: int = Field(RL.prompts_per_step, ge=1)
    group_size: int = Field(RL.group_size, ge=2)
    minibatches: int = Field(RL.minibatches, ge=1)
    lr: float = Field(RL.lr, gt=0)
    eval_seed: int = RL.eval_seed


class ExampleBackend(Backend):
    """One cell = one ``python -m gppo_example_backend --cell <json>`` Ray job."""

    name = "example"
    settings_model = ExampleSettings
    entrypoint_module = "gppo_example_backend"

    def default_benchmarks(self, settings: BaseModel) -> tuple[str, ...]:
        return get_domain(ExampleSettings.model_validate(settings).domain).benchmark_names

    def known_benchmarks(self, settings: BaseModel) -> tuple[str, ...] | None:
        return self.default_benchmarks(settings)

    def job(self, cell: Cell) -> Job:
        argv = (sys.executable, "-m", self.entrypoint_module, "--cell", cell.to_json())
        return Job(argv=argv, env={"OMP_NUM_THREADS": "1"}, resources=cell.resources)
