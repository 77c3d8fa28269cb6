"""The typed grid spec (pydantic v2; unknown keys refused everywhere).

Fields and defaults::

    name: str                      required, [A-Za-z0-9._-]{1,64}
    backend: local                 any registered backend (local | verl | trl | a plugin's);
                                   default :data:`gppo.cell.DEFAULT_BACKEND`
    <backend>: {}                  the backend's own section (``local:``, ``verl:``, ``trl:``),
                                   validated by its ``settings_model``; stored as
                                   ``GridSpec.settings``
    grid.divergences: [tv, chi2, kl, hellinger]     registry names or alpha:<a>; unique;
                                   default: the divergences tagged ``paper``
    grid.estimators: [mc, atomic, binary]           registry names; unique; default: the
                                   estimators tagged ``paper``
    baselines: []                  any method tagged ``baseline``: gspo, gmpo, sapo, cispo, clip_cov
    baseline_params: {}            {baseline: {param: value}}, checked by the method registry
    objective: {ratio_bounds: [0.5, 10.0], dual_clip: 10.0, loss_agg_mode: token-mean}
                                   defaults: :mod:`gppo.objectives.defaults` (as r_min, reference)
    calibration: {r_min: 0.8, delta: {}}   delta keyed by divergence, cell id or cell id-sN
    seeds: 1                       a count n (seeds 0..n-1), an explicit list, or adaptive:
                                   {min: 2, max: 8, batch: 1, equivalence: null} (every cell
                                   starts with min seeds; undecided rows get batch more a round,
                                   up to max; equivalence: a margin in points; first: the first
                                   seed, default 0; docs/statistics.md)
    reference: tv/mc               <divergence>/<estimator> of the grid or a baseline; when left
                                   out and tv/mc is not in the grid: the grid's first cell
    benchmarks: []                 empty: the backend's defaults; else checked against its list
    eval: {k: 8}                   avg@k; default :data:`gppo.cell.DEFAULT_EVAL_K`
    tracking: {uri: null, experiment: null, shared_filesystem: false}   null uri:
                                   MLFLOW_TRACKING_URI or sqlite:///mlflow.db (made absolute);
                                   experiment: the name; shared_filesystem: true confirms a local
                                   uri is on a filesystem every Ray node mounts (else a remote
                                   ray.address with a SQLite/file store is refused)
    ray: {address: null, max_concurrent: 2, resources: {num_cpus: 1, num_gpus: 0, memory_gb: null,
                                   custom: {}}, unreachable_timeout_s: 600}   custom: Ray custom
                                   resources {name: amount}; unreachable_timeout_s: how long the
                                   launcher waits on a cluster that does not answer before it
                                   gives up (exit 1; its jobs are left for a relaunch)
    retries: {max: 2, backoff_s: 1.0, backoff_max_s: 60}   delay before retry n: base·2^(n-1)
    overrides: {}                  keyed by cell id with or without -sN (the -sN entry wins):
                                   {<backend>: {...}, delta: float, params: {...}, resources: {...}}
                                   params: a baseline's hyper-parameters, or for gppo cells
                                   ratio_bounds / dual_clip / loss_agg_mode
    axes: {}                       {dotted path: [values]}: the sweep is the product of cells,
                                   seeds and every axis (paths and rules: :mod:`gppo.grid.axes`)
    select: []                     axes on which report's "each cell at its best point" picks
                                   each cell's value by its held-out selection score
    cost: null                     {gpu_hour: 2.5, cpu_hour: 0.05, currency: USD}: a price that
                                   turns CPU-/GPU-hours into money wherever they are shown
    budget: null                   {gpu_hours, cpu_hours, runs} (any of them): the launcher starts
                                   no run whose forecast would take the sweep past one
                                   (docs/cost.md; :mod:`gppo.sweep.planning.budget`)
    analysis: {test: welch, correction: bh}   Table 1's test against the reference (welch |
                                   pooled; also the adaptive rule's) and its mark's correction
                                   (bh | holm); docs/statistics.md

δ, r_min, ratio_bounds and dual_clip are checked by the objectives library's own rules
(:mod:`gppo.objectives.checks`: δ a finite number > 0, r_min in (0, 1), dual_clip > 1 or null).

The backend's own section (``local:`` / ``verl:`` / ``trl:``, named after ``backend``) is
:attr:`GridSpec.settings` here (:func:`gppo.grid.load.spec_from_yaml` /
:func:`~gppo.grid.load.spec_to_yaml` convert between the two shapes) and is validated by the
backend's ``settings_model`` at expansion; in an override the same key overrides the backend
settings of one cell.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gppo import processes
from gppo.cell import DEFAULT_BACKEND, DEFAULT_EVAL_K
from gppo.grid import registries
from gppo.objectives import defaults
from gppo.objectives.aggregation import AGG_MODES
from gppo.objectives.checks import check_delta, check_dual_clip, check_r_min, check_ratio_bounds
from gppo.objectives.divergences import paper_divergences
from gppo.objectives.estimators import paper_estimators
from gppo.objectives.methods import baseline_names
from gppo.store.cost import Price

NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: the default grid, the paper's 4 x 3 (tagged ``paper`` in the registries, registration order)
DEFAULT_DIVERGENCES = tuple(paper_divergences())
DEFAULT_ESTIMATORS = tuple(paper_estimators())
#: the baselines a spec may name (tagged ``baseline`` in the method registry)
BASELINES = tuple(baseline_names())
LOSS_AGG_MODES = AGG_MODES  # the aggregations the losses implement (verl's)


def _check_seed(seed: int) -> int:
    if seed < 0:
        raise ValueError(f"seeds must be >= 0 (got {seed})")
    return seed


DivergenceName = Annotated[str, AfterValidator(registries.check_divergence)]
EstimatorName = Annotated[str, AfterValidator(registries.check_estimator)]
BaselineName = Annotated[str, AfterValidator(registries.check_baseline)]
Seed = Annotated[int, AfterValidator(_check_seed)]
#: the objectives library's rules and wording (:mod:`gppo.objectives.checks`), nothing restated
Delta = Annotated[float, AfterValidator(check_delta)]
RMin = Annotated[float, AfterValidator(check_r_min)]
DualClip = Annotated[float | None, AfterValidator(check_dual_clip)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _unique(values: list[Any], what: str) -> list[Any]:
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"duplicate {what} {v!r}")
        seen.add(v)
    return values


class GridAxes(_Strict):
    divergences: list[DivergenceName] = Field(
        default_factory=lambda: list(DEFAULT_DIVERGENCES), min_length=1
    )
    estimators: list[EstimatorName] = Field(
        default_factory=lambda: list(DEFAULT_ESTIMATORS), min_length=1
    )

    @field_validator("divergences")
    @classmethod
    def _divs(cls, v: list[str]) -> list[str]:
        return _unique(v, "divergence")

    @field_validator("estimators")
    @classmethod
    def _ests(cls, v: list[str]) -> list[str]:
        return _unique(v, "estimator")


class Objective(_Strict):
    ratio_bounds: tuple[float, float] | None = defaults.RATIO_BOUNDS
    dual_clip: DualClip = defaults.DUAL_CLIP
    loss_agg_mode: Literal[LOSS_AGG_MODES] = defaults.LOSS_AGG_MODE  # type: ignore[valid-type]  # a tuple of literals, built once

    @field_validator("ratio_bounds")
    @classmethod
    def _bounds(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        return check_ratio_bounds(v)  # the library's rule and wording


class Calibration(_Strict):
    r_min: RMin = defaults.R_MIN
    #: explicit δ keyed by divergence (``kl``) or cell id (``kl-atomic`` / ``kl-atomic-s0``).
    delta: dict[str, Delta] = Field(default_factory=dict)


class Eval(_Strict):
    k: int = Field(DEFAULT_EVAL_K, ge=1, le=1024)


class Tracking(_Strict):
    uri: str | None = None
    experiment: str | None = None
    #: the user confirms that a local ``uri`` (SQLite file / folder) is on a filesystem every Ray
    #: node mounts at the same path; without it a remote ``ray.address`` with a local store is
    #: refused (:mod:`gppo.sweep.cluster.guard`).
    shared_filesystem: bool = False
    #: seconds the tracking server may go without answering the launcher before it stops with
    #: :class:`gppo.errors.TrackingUnreachable` (running jobs and their runs are left for a
    #: relaunch); meanwhile the launcher holds its submissions and run endings
    unreachable_timeout_s: float = Field(600.0, gt=0)


#: resource names Ray manages itself (``num_cpus`` / ``num_gpus`` / ``memory_gb`` set them)
RAY_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


class ResourceSpec(_Strict):
    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    memory_gb: float | None = Field(None, gt=0)
    #: Ray custom resources the job needs, e.g. ``{trainer_node: 1}`` to run only on the nodes
    #: started with ``ray start --resources='{"trainer_node": 8}'``
    custom: dict[str, float] = Field(default_factory=dict)

    @field_validator("custom")
    @classmethod
    def _custom(cls, v: dict[str, float]) -> dict[str, float]:
        for name, amount in v.items():
            if name in RAY_BUILTIN_RESOURCES or not re.match(r"^[A-Za-z0-9_.:/-]{1,100}$", name):
                raise ValueError(
                    f"custom resource {name!r}: a name of A-Z a-z 0-9 _ . : / - that is not one of "
                    f"{', '.join(RAY_BUILTIN_RESOURCES)} (use num_cpus / num_gpus / memory_gb)"
                )
            if not amount > 0:
                raise ValueError(f"custom resource {name!r} must be > 0 (got {amount})")
        return v


class LocalHead(_Strict):
    """Resources of the local Ray head the launcher starts when no ``ray.address`` is given
    (``ray start --num-cpus/--num-gpus``). Logical, not checked against the hardware. A field left
    None is filled by :func:`gppo.sweep.cluster.connect.local_head_for` from what the backend needs (a verl
    CPU run's fake GPUs, since verl asks Ray for GPU bundles), else Ray detects it."""

    num_cpus: int | None = Field(None, ge=1)
    num_gpus: int | None = Field(None, ge=0)


#: cells (or trials) running at once when the spec's ``ray.max_concurrent`` is not given
MAX_CONCURRENT = 2


class RaySpec(_Strict):
    address: str | None = None
    local_head: LocalHead = Field(default_factory=LocalHead)
    max_concurrent: int = Field(MAX_CONCURRENT, ge=1, le=10_000)
    resources: ResourceSpec = Field(default_factory=ResourceSpec)
    #: seconds without an answer from the cluster (every job status poll failing) after which the
    #: launcher gives up with :class:`gppo.errors.ClusterUnreachable`; long enough to ride out a
    #: head restart or a network blip, the jobs themselves go on (a relaunch re-attaches)
    unreachable_timeout_s: float = Field(600.0, gt=0)


class Retries(_Strict):
    max: int = Field(2, ge=0, le=100)
    backoff_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(60.0, ge=0)
    #: an attempt whose run logs no new training step for this many seconds (counted from its
    #: submission, then from its latest new step) is stopped and retried like a failure (a hung
    #: rollout engine, a dead collective). None: the backend's default
    #: (:meth:`gppo.backends.base.Backend.stall_timeout_s`); 0: never
    stall_timeout_s: float | None = Field(None, ge=0)
    #: the same limit before an attempt's first training step of its own (start-up: loading the
    #: model, starting the rollout engine, the step-0 evaluation; a resumed verl run must log a
    #: step past its checkpoint). None: ``stall_timeout_s``
    first_step_timeout_s: float | None = Field(None, ge=0)
    #: when an attempt ends (stall, cancel, Ctrl-C, failure, the sweep's end), its processes
    #: still alive on this machine get SIGTERM, then this many seconds, then SIGKILL, and are
    #: checked gone before its retry is submitted (gppo.processes.end_attempt); also the grace
    #: Ray gives a stopped job's driver on a local head (RAY_JOB_STOP_WAIT_TIME_S)
    kill_grace_s: float = Field(processes.KILL_GRACE_S, ge=0, le=3600)


class Override(_Strict):
    """Per-cell override; the backend section (``local:``) is ``settings`` here."""

    settings: dict[str, Any] = Field(default_factory=dict)
    delta: Delta | None = None
    params: dict[str, Any] = Field(default_factory=dict)  # method hyper-parameters (baselines)
    resources: ResourceSpec | None = None


class CostSpec(_Strict):
    """A price per CPU-hour and per GPU-hour (``cost:``)."""

    gpu_hour: float = Field(0.0, ge=0)
    cpu_hour: float = Field(0.0, ge=0)
    currency: str = Field("USD", pattern=r"^[A-Za-z$€£¥._-]{1,12}$")

    @property
    def price(self) -> Price:
        return Price(self.gpu_hour, self.cpu_hour, self.currency)


class Budget(_Strict):
    """What a sweep may spend (``budget:``): GPU-hours, CPU-hours, runs; any combination."""

    gpu_hours: float | None = Field(None, gt=0)
    cpu_hours: float | None = Field(None, gt=0)
    runs: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _some(self) -> Budget:
        if self.gpu_hours is None and self.cpu_hours is None and self.runs is None:
            raise ValueError("budget needs at least one of gpu_hours, cpu_hours, runs")
        return self


#: the most seeds a cell may have (a count, or an adaptive ``max``)
MAX_SEEDS = 10_000


class AnalysisSpec(_Strict):
    """``analysis: {test, correction, figures}``: Table 1's comparison with the reference
    (docs/statistics.md). ``test``: ``welch`` (each comparison's own variances,
    Welch-Satterthwaite; the default) or ``pooled`` (one within-cell variance pooled over the
    table's rows; assumes equal seed variances); the adaptive rule tests with the same at every
    look. ``correction``: ``bh`` (Benjamini-Hochberg, the default) or ``holm`` for Table 1's
    mark (the adaptive rule always holds the family-wise rate, Holm). ``figures``: whether the
    sweep's reports (``launch``'s at the end, ``gppo-sweep report``'s unless it says
    ``--figures``) draw Figures 1-2 and the aggregate view (the default) or only write the
    tables and the page: about 3 s of CPU less per report, for scripted or many small sweeps."""

    test: Literal["welch", "pooled"] = defaults.TEST
    correction: Literal["bh", "holm"] = "bh"
    figures: bool = True


class AdaptiveSeeds(_Strict):
    """``seeds: {min, max, batch, equivalence, first}``: adaptive seeds (issue 48). Every cell
    starts with ``min`` seeds (``first`` .. ``first + min - 1``); after each round the rows
    still undecided against the reference get ``batch`` more, and the reference with them, up
    to ``max`` (:mod:`gppo.stats.sequential`, :mod:`gppo.stats.rounds`). ``equivalence``: a margin
    in points within which a row is shown equivalent (two one-sided tests); None: none."""

    min: int = defaults.SEEDS_MIN
    max: int = defaults.SEEDS_MAX
    batch: int = defaults.SEEDS_BATCH
    equivalence: float | None = None
    #: the first seed: the cells' seeds are first, first + 1, ..., first + max - 1
    first: int = 0

    @model_validator(mode="after")
    def _check(self) -> AdaptiveSeeds:
        checks = [
            (
                "min",
                self.min >= 2,
                f"at least 2 (a row needs 2 seeds for a variance; got {self.min})",
            ),
            ("max", self.max >= self.min, f"at least min={self.min} (got {self.max})"),
            ("max", self.max <= MAX_SEEDS, f"at most {MAX_SEEDS} (got {self.max})"),
            ("batch", self.batch >= 1, f"at least 1 (got {self.batch})"),
            ("first", self.first >= 0, f">= 0 (got {self.first})"),
            (
                "equivalence",
                self.equivalence is None or self.equivalence > 0,
                f"a margin in points > 0 (got {self.equivalence})",
            ),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"{name} must be {allowed}")
        return self


def seed_list(seeds: int | list[int] | AdaptiveSeeds) -> list[int]:
    """Every seed a cell may get: 0..n-1 for a count, the list, or first..first+max-1 for
    adaptive seeds (the rounds run a prefix of it, :mod:`gppo.stats.rounds`)."""
    if isinstance(seeds, AdaptiveSeeds):
        return list(range(seeds.first, seeds.first + seeds.max))
    return list(range(seeds)) if isinstance(seeds, int) else list(seeds)


class GridSpec(_Strict):
    name: str
    backend: str = DEFAULT_BACKEND
    settings: dict[str, Any] = Field(default_factory=dict)  # the backend's own section
    grid: GridAxes = Field(default_factory=GridAxes)
    baselines: list[BaselineName] = Field(default_factory=list)
    baseline_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    objective: Objective = Field(default_factory=Objective)
    calibration: Calibration = Field(default_factory=Calibration)
    seeds: int | list[Seed] | AdaptiveSeeds = 1
    reference: str = defaults.REFERENCE
    benchmarks: list[str] = Field(default_factory=list)
    eval: Eval = Field(default_factory=Eval)
    tracking: Tracking = Field(default_factory=Tracking)
    ray: RaySpec = Field(default_factory=RaySpec)
    retries: Retries = Field(default_factory=Retries)
    overrides: dict[str, Override] = Field(default_factory=dict)
    #: dotted path -> values (checked against the backend at expansion, :mod:`gppo.grid.axes`)
    axes: dict[str, Any] = Field(default_factory=dict)
    select: list[str] = Field(default_factory=list)
    cost: CostSpec | None = None
    budget: Budget | None = None
    analysis: AnalysisSpec = Field(default_factory=AnalysisSpec)

    @property
    def price(self) -> Price | None:
        """The ``cost:`` price (None: hours only)."""
        return self.cost.price if self.cost else None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"invalid name {v!r}; allowed: 1-64 characters of A-Z a-z 0-9 . _ -")
        return v

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        return registries.check_backend(v)

    @field_validator("baselines")
    @classmethod
    def _baselines(cls, v: list[str]) -> list[str]:
        return _unique(v, "baseline")

    @field_validator("seeds", mode="before")
    @classmethod
    def _adaptive_seeds(cls, v: Any) -> Any:
        """A mapping is adaptive seeds: validated here so that its own error is the one shown
        (not the union's "should be a valid integer")."""
        if not isinstance(v, dict):
            return v
        try:
            return AdaptiveSeeds.model_validate(v)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown key {where!r}; allowed: min, max, batch, equivalence, first"
            elif where:
                msg = f"{where}: {msg}"
            raise ValueError(msg) from None

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: int | list[int] | AdaptiveSeeds) -> int | list[int] | AdaptiveSeeds:
        if isinstance(v, AdaptiveSeeds):
            return v
        if isinstance(v, int):
            if not 1 <= v <= MAX_SEEDS:
                raise ValueError(
                    f"seeds must be a count in 1..{MAX_SEEDS}, a list of seeds or "
                    f"{{min, max}} (got {v})"
                )
            return v
        if not v:
            raise ValueError("seeds list is empty")
        return _unique(v, "seed")

    @field_validator("benchmarks")
    @classmethod
    def _benchmarks(cls, v: list[str]) -> list[str]:
        for b in v:
            if not re.match(r"^[A-Za-z0-9._-]{1,100}$", b):
                raise ValueError(f"invalid benchmark name {b!r}; allowed: A-Z a-z 0-9 . _ -")
        return _unique(v, "benchmark")

    @field_validator("tracking")
    @classmethod
    def _tracking(cls, v: Tracking) -> Tracking:
        if v.experiment is not None and not v.experiment.strip():
            raise ValueError("tracking.experiment must not be empty")
        return v

    @model_validator(mode="after")
    def _cross(self) -> GridSpec:
        grid_refs = [f"{d}/{e}" for d in self.grid.divergences for e in self.grid.estimators]
        if "reference" not in self.model_fields_set and self.reference not in grid_refs:
            # the default reference is not in this grid: compare against its first cell instead
            object.__setattr__(self, "reference", grid_refs[0])
        if self.adaptive is not None and self.select:
            raise ValueError(
                "select: is not allowed with adaptive seeds (seeds: {min, max}): a cell's best "
                "point would be chosen on seeds the rounds gave it; use a fixed seeds count"
            )
        for name in self.baseline_params:
            if name not in self.baselines:
                raise ValueError(
                    f"baseline_params.{name}: {name!r} is not in baselines "
                    f"({', '.join(self.baselines) or 'none'})"
                )
        return self

    @property
    def adaptive(self) -> AdaptiveSeeds | None:
        """The adaptive seeds (``seeds: {min, max}``), None for a fixed count or list."""
        return self.seeds if isinstance(self.seeds, AdaptiveSeeds) else None

    @property
    def seed_list(self) -> list[int]:
        """:func:`seed_list` of the spec's ``seeds``."""
        return seed_list(self.seeds)

    @property
    def experiment(self) -> str:
        return self.tracking.experiment or self.name
