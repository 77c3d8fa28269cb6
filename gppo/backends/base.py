"""The Backend contract: a small object that turns a :class:`Cell` into a :class:`Job`.

A backend does no I/O in :meth:`Backend.job`: it only builds the argv, environment and resources
of the process that the dispatcher will run as one Ray job. The process itself (the backend's
entrypoint, ``python -m gppo.backends.<name>``) trains, evaluates avg@k and logs into the MLflow
run named by ``MLFLOW_RUN_ID`` using the names in :mod:`gppo.metrics`:

* every step: ``metrics.TRAIN_SCORE``, ``metrics.ENTROPY``, the loss diagnostics via
  ``metrics.train_metric(key)``, ``metrics.WALL_TIME``;
* every evaluation (step 0 = base model, and the final step): ``metrics.eval_metric(b, k)`` for
  each benchmark ``b`` and ``metrics.eval_domain_metric(k)``;
* at the very end, after the final evaluation is logged: tag ``metrics.TAG_FINISHED = "true"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel

from gppo.backends.checkresult import CellCheck, StepTiming
from gppo.cell import Cell, Resources
from gppo.errors import BackendError
from gppo.registry import Registry
from gppo.store.cost import cost_settings


@dataclass
class DataReport:
    """What :meth:`Backend.prepare_data` wrote: ``written`` rows to ``output``; the rows it
    ``rejected`` as (row number, reason), listed in ``rejects_file`` when skipped."""

    written: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    output: Path | None = None
    rejects_file: Path | None = None


@dataclass(frozen=True)
class Job:
    """A process to run as one Ray job: argv (never a shell string), extra env, resources."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)

    @property
    def entrypoint(self) -> str:
        """The argv quoted for Ray's shell entrypoint: no value can inject shell syntax."""
        return shlex.join(self.argv)


#: :meth:`Backend.stall_timeout_s`'s limits (seconds without a new logged training step): a cell
#: of testbed size, and one of a real model (verl; TRL with a model of your own), which between
#: two steps may evaluate whole benchmarks, save a checkpoint or start vLLM
STALL_TESTBED_S = 600.0
STALL_REAL_MODEL_S = 3600.0


def thread_env(num_threads: int) -> dict[str, str]:
    """The environment that gives a CPU cell ``num_threads`` OpenMP/MKL threads (torch reads it
    when it is imported)."""
    return {"OMP_NUM_THREADS": str(num_threads), "MKL_NUM_THREADS": str(num_threads)}


def held_cpus(resources: Resources, cpus: float) -> Resources:
    """``resources`` asking Ray for at least ``cpus`` CPUs: a CPU cell's threads (times its
    processes), which it holds and is billed for (:mod:`gppo.store.cost`)."""
    if resources.num_cpus >= cpus:
        return resources
    return dataclasses.replace(resources, num_cpus=float(cpus))


def head_cpus_for(cpus: float) -> Resources | None:
    """What a local head must have for a cell that holds ``cpus`` CPUs: that many, when this
    machine has fewer (Ray's own count could never place the cell); else None, what Ray detects
    (its CPUs then bound how many such cells run at once)."""
    return Resources(num_cpus=float(cpus)) if cpus > (os.cpu_count() or 1) else None


#: a backend's settings model (``Backend[VerlSettings]``: its hooks are typed with it)
SettingsT = TypeVar("SettingsT", bound=BaseModel)


class Backend(ABC, Generic[SettingsT]):
    """Base class of backends. Subclasses set the class attributes and implement :meth:`job`."""

    name: ClassVar[str]
    #: pydantic model of the backend's own section of the grid spec (``local:`` / ``verl:``).
    settings_model: ClassVar[type[BaseModel]]
    #: module run inside the Ray job, e.g. ``gppo.backends.local``.
    entrypoint_module: ClassVar[str]
    #: True when a retried attempt resumes the same MLflow run (verl: checkpoint resume);
    #: False when each attempt starts clean in a new child run (the CPU testbed).
    reuse_run_on_retry: ClassVar[bool] = False
    #: True when the entrypoint process itself uses ``Job.resources`` (submit it with
    #: entrypoint_num_cpus/num_gpus). False when the entrypoint is a driver that starts its own
    #: GPU actors (verl): the launcher still gates the number of running cells (``max_concurrent``) but submits
    #: the entrypoint with no GPUs, or the job's own placement groups could never get them.
    entrypoint_holds_resources: ClassVar[bool] = True
    #: whether a cell with ``Cell.select`` logs a held-out selection score (``select/...``, on
    #: prompts disjoint from the reported benchmarks); a spec's ``select:`` needs it
    logs_selection_score: ClassVar[bool] = False
    #: whether :meth:`preflight` can run one real training step per cell (``check
    #: --train-step``); a backend that cannot refuses the option (:meth:`check_options`)
    preflight_train_step: ClassVar[bool] = False

    def validate_settings(self, raw: Mapping[str, object]) -> SettingsT:
        """Validate the backend's section (raises pydantic.ValidationError)."""
        # (an instance of settings_model, which a ClassVar cannot name by the type variable)
        return cast(SettingsT, self.settings_model.model_validate(dict(raw)))

    def settings_of(self, cell: Cell) -> SettingsT:
        """The cell's validated settings: the model the grid expansion kept, else (a cell read
        back from JSON) its ``settings`` validated now."""
        if isinstance(cell.settings_model, self.settings_model):
            return cast(SettingsT, cell.settings_model)
        return self.validate_settings(cell.settings)

    def cost_settings(self, cell: Cell) -> dict[str, object]:
        """The cell's settings that change how long its run takes, for its cost key
        (:func:`gppo.store.cost.cost_key`): the fields of :attr:`settings_model` marked
        :data:`~gppo.store.cost.DRIVES_COST` (an unmarked field counts too), as in
        ``cell.settings``."""
        return cost_settings(self.settings_model, cell.settings)

    def default_benchmarks(self, settings: SettingsT) -> tuple[str, ...]:
        """Benchmarks evaluated when the spec names none."""
        return ()

    def known_benchmarks(self, settings: SettingsT) -> tuple[str, ...] | None:
        """Benchmarks the spec may name, or ``None`` when any name is allowed."""
        return None

    def stall_timeout_s(self, settings: SettingsT, *, first_step: bool = False) -> float | None:
        """Default of ``retries.stall_timeout_s`` for a cell with these settings: how long its
        run may log no new training step before the attempt is stopped and retried; with
        ``first_step``, before its first one (``retries.first_step_timeout_s``'s default).
        ``None``: no stall detection."""
        return None

    def local_head_resources(self, settings: SettingsT) -> Resources | None:
        """What one cell with these settings needs of a local Ray head the launcher starts
        (``ray start --num-cpus/--num-gpus``, e.g. a verl CPU cell's fake GPUs); ``None``: what
        Ray detects."""
        return None

    def preflight(
        self, plan: Any, spec_path: str, say: Callable[[str], None], *, train_step: bool = False
    ) -> list[CellCheck]:
        """``gppo-sweep check``: check each cell of ``plan`` (a :class:`~gppo.grid.load.Plan`)
        on this machine before anything is launched, one line per cell through ``say``;
        ``train_step``: also one real training step where the backend can. Default: the backend
        has none (:class:`~gppo.errors.BackendError`)."""
        raise BackendError(
            f"{spec_path}: backend: {self.name!r} has no pre-flight checks (`gppo-sweep plan` "
            "validates its settings)"
        )

    def step_timing(self, cell: Cell) -> StepTiming | None:
        """One training step of ``cell`` (and the work around a run's steps) timed on this
        machine, for ``plan``'s cost forecast when the store has no comparable runs
        (:mod:`gppo.sweep.planning.forecast`); ``None`` (the default): the backend cannot time one in
        seconds here (verl and TRL start a trainer: their ``check --train-step`` is the measure)."""
        return None

    def check_options(self, spec_path: str, *, train_step: bool = False) -> None:
        """Refuse, in one line (:class:`~gppo.errors.BackendError`), a ``check`` option this
        backend does not support, before anything runs."""
        if train_step and not self.preflight_train_step:
            raise BackendError(
                f"{spec_path}: --train-step: backend {self.name!r} has no training-step check "
                "(its pre-flight runs without the option)"
            )

    def prepare_data(
        self, input_path: Path, output_path: Path, source: str, *, split: str, skip_invalid: bool
    ) -> DataReport:
        """``gppo-sweep data prepare``: convert the user's file at ``input_path`` into the rows
        this backend's cells read, for benchmark (data source) ``source``, written to
        ``output_path`` (nothing written when a row cannot be converted, unless
        ``skip_invalid``). Default: the backend reads no prepared data
        (:class:`~gppo.errors.BackendError`)."""
        raise BackendError(
            f"backend {self.name!r} reads no prepared data files (its cells build their own "
            "tasks); `gppo-sweep data prepare` is for a backend that trains on a user's data: "
            f"--backend {' | '.join(backends_with('prepare_data')) or '(none installed)'}"
        )

    def prepare(self, settings: SettingsT) -> None:  # an optional hook: nothing by default
        """Build on the launching machine what cells with these settings need before any is
        submitted (idempotent; e.g. the verl smoke assets). Default: nothing."""

    @contextlib.contextmanager
    def serving(
        self, *, on_this_machine: bool, on_job_end: Callable[[], None] | None = None
    ) -> Iterator[Callable[[Job], Job]]:
        """Around a launch's (or a study's) dispatch: start what its jobs can share and yield
        how a job uses it (``on_this_machine``: the jobs run here, on a local Ray head). The local
        backend starts its fork server (:mod:`gppo.backends.local.forkserver`), which calls
        ``on_job_end`` (from another thread) as soon as a cell returns, ahead of Ray's job
        status: a hint to poll now. Default: nothing, jobs unchanged, no hint."""
        yield lambda job: job

    @abstractmethod
    def job(self, cell: Cell) -> Job:
        """Turn one resolved cell into the job that trains and evaluates it (pure)."""


#: The entry-point group that names backends: ``name = "package.module:BackendClass"`` in a
#: package's metadata (ours: pyproject.toml's ``[project.entry-points."gppo.backends"]``), so a
#: package outside this repository adds a backend a spec can name (``backend: name``).
ENTRY_POINT_GROUP = "gppo.backends"


#: the registry tag of the backends this package ships: entry points whose class lives in ``gppo``
BUILT_IN = "built-in"


def _declare_entry_points(registry: Registry[type[Backend]]) -> None:
    """Declare (not import) every backend named in the installed packages' entry points, ours
    first (tagged :data:`BUILT_IN`), each group by name."""
    from importlib.metadata import entry_points

    def ours(ep: Any) -> bool:
        return str(ep.value).startswith("gppo.")

    found = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: (not ours(ep), ep.name))
    for ep in found:
        if ep.name not in registry:  # a class registered by hand keeps its name
            registry.add_lazy(ep.name, ep.value, tags=(BUILT_IN,) if ours(ep) else ())


#: the backends by name: declared from :data:`ENTRY_POINT_GROUP` on the first lookup and
#: imported on first use, so that ``import gppo`` stays light (no verl, no torch)
BACKENDS: Registry[type[Backend]] = Registry("backend", discover=_declare_entry_points)


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator adding a backend to the registry under ``cls.name`` (a taken name raises
    :class:`~gppo.errors.DuplicateNameError`)."""
    return BACKENDS.add(cls.name, cls)


def built_in_backends() -> list[str]:
    """The backends this package ships, by name (from its entry points, ``local`` first)."""
    return BACKENDS.names(BUILT_IN)


def backends_with(hook: str) -> list[str]:
    """The registered backends whose class overrides :class:`Backend`'s ``hook`` (e.g.
    ``prepare_data``), by name; imports each backend's module (not its trainer)."""
    out = []
    for name in BACKENDS.names():
        try:
            cls = BACKENDS.get(name)
        except ImportError:  # a backend whose extra is not installed here
            continue
        if getattr(cls, hook) is not getattr(Backend, hook):
            out.append(name)
    return out


def get_backend(name: str) -> Backend:
    """Instantiate the backend registered as ``name``; unknown names list the known ones
    (:class:`~gppo.errors.UnknownNameError`); a built-in one whose module fails to import raises
    that ImportError."""
    return BACKENDS.get(name)()
