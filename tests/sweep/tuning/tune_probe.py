"""A small real backend for the tuner tests: each trial is a real python process
(tune_probe_job.py) that logs ``train/score`` per step and avg@k at the end into its MLflow run,
with values that depend on the trial's parameters (lr, estimator, δ), so the sampler, the pruner
and the objective see a real signal.

Score: q = 1 / (1 + (log10(lr) + 3)^2) + 0.1·[estimator == atomic] (best at lr = 1e-3);
train/score at step t = q · t / steps; eval/<b>/avg_at_k = eval/avg_at_k = q at the last step.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from gppo.backends.base import Backend, Job, register_backend
from gppo.cell import Cell

JOB_SCRIPT = str(Path(__file__).with_name("tune_probe_job.py"))


class TuneProbeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    domain: str = "probe"
    steps: int = 6
    sleep_s: float = 0.2  # per step
    lr: float = 1e-3
    width: int = 4  # an integer setting to search
    fail_below_lr: float | None = None  # the job exits 3 when lr is below this
    #: the first attempt of each trial hangs after this step (a hung engine); None: never
    hang_after_step: int | None = None
    marker_dir: str | None = None  # where attempts are counted (one line per start)


@register_backend
class TuneProbeBackend(Backend):
    name = "tuneprobe"
    settings_model = TuneProbeSettings
    entrypoint_module = "tests.sweep.tuning.tune_probe_job"

    def default_benchmarks(self, settings: BaseModel) -> tuple[str, ...]:
        return ("p1", "p2")

    def job(self, cell: Cell) -> Job:
        return Job(argv=(sys.executable, JOB_SCRIPT, cell.to_json()), resources=cell.resources)


def quality(lr: float, estimator: str | None) -> float:
    return 1.0 / (1.0 + (math.log10(lr) + 3.0) ** 2) + (0.1 if estimator == "atomic" else 0.0)
