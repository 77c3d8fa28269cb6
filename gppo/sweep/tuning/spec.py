"""The tuning spec: a grid spec's base settings plus a ``tune:`` section (pydantic v2).

A tuning spec is a grid spec (same YAML conventions: backend section, calibration, eval, tracking,
ray, ...) without ``grid``/``baselines``, plus::

    tune:
      study: null              # Optuna study name; default: the spec name
      storage: null            # any SQLAlchemy URL; default: SQLite beside the MLflow store
      n_trials: 20             # trials to finish (COMPLETE + PRUNED); failed ones do not count
      n_parallel: null         # trials running at once; null: ray.max_concurrent
      sampler: {kind: tpe, seed: 0, n_startup_trials: 4}
      pruner: {kind: median, n_startup_trials: 2, n_warmup_steps: 3}   # | hyperband | none
      objective: {metric: null}      # null: mean avg@k over the domain's benchmarks (eval/avg_at_k)
      intermediate: {metric: train/score}   # read back while the job runs (pruning)
      space:
        divergence: [tv, kl, alpha]  # a name or a list; "alpha" = alpha:<a> with a from `alpha`
        alpha: {low: 0.2, high: 3.0}
        estimator: [mc, atomic, binary]
        radius: {param: r_min, low: 0.6, high: 0.95}   # or {param: delta, ...}; log-uniform
        lr: {key: lr, low: 1.0e-4, high: 1.0e-2}         # a backend setting, log-uniform
        settings: {"rollout.n": {low: 4, high: 16, int: true}}   # more backend settings, or
                                 # any path an axis may vary (objective.loss_agg_mode: [...]),
                                 # parsed and checked by gppo.grid.axes as an axis's path is
      per_cell: false          # true: one study per (divergence, estimator), see percell.py
      default_first: false     # true: trial 0 = the base config (r_min 0.8...), the reference
      max_failures: null       # stop after this many FAIL trials (null: n_trials)
      poll_s: 2.0              # how often running trials are polled
      stale_after_s: 120       # a RUNNING trial of a silent tuner on another host is orphaned
      top: 10                  # rows of the best-trials table

Errors are one line each, ``FILE: field.path: message`` (:class:`TuneSpecError`); nothing is
started before the whole spec (the base grid settings through the grid loader included) is valid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from gppo import metrics as M
from gppo.errors import SpecError, TuneSpecError
from gppo.grid import registries
from gppo.grid.load import load_spec
from gppo.grid.overrides import apply_texts, attributed, texts_of
from gppo.grid.schema import MAX_CONCURRENT
from gppo.grid.spec_errors import from_validation_error

#: Grid-spec keys a tuning spec may not set: the design space lives in ``tune.space``.
FORBIDDEN_BASE_KEYS = ("grid", "baselines", "baseline_params")
NAME_PATTERN = r"^[A-Za-z0-9._-]+$"
#: The divergence entry that stands for the ``alpha:<a>`` family with a continuous ``a``.
ALPHA_FAMILY = "alpha"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Range(_Strict):
    """A numeric interval sampled by Optuna (``log``: log-uniform; ``int``: integers)."""

    low: float
    high: float
    log: bool = True
    int: bool = False

    @model_validator(mode="after")
    def _check(self) -> Range:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("low and high must be finite")
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("a log-uniform range needs low > 0 (or set log: false)")
        return self


class AlphaRange(Range):
    """Range of ``a`` for ``alpha:<a>`` (uniform by default; a = 0 and a = 1 are limits, not members)."""

    log: bool = False

    @model_validator(mode="after")
    def _no_singular_ends(self) -> AlphaRange:
        if self.low in (0.0, 1.0) or self.high in (0.0, 1.0):
            raise ValueError(
                "alpha range ends cannot be 0 or 1 (the alpha family is undefined there)"
            )
        return self


class RadiusRange(_Strict):
    """The trust-region radius: ``r_min`` (δ calibrated from it per divergence by
    :func:`gppo.objectives.calibrate_delta`) or ``delta`` directly."""

    param: Literal["r_min", "delta"] = "r_min"
    low: float
    high: float
    log: bool = True

    @model_validator(mode="after")
    def _check(self) -> RadiusRange:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.low <= 0:
            raise ValueError(f"{self.param} must be > 0")
        if self.param == "r_min" and self.high >= 1:
            raise ValueError("r_min must lie in (0, 1)")
        return self


class LrRange(Range):
    """Learning rate: a key of the backend section (dotted for nested settings)."""

    key: str = "lr"


def _names(v: str | list[str]) -> list[str]:
    names = [v] if isinstance(v, str) else list(v)
    if not names:
        raise ValueError("give at least one name")
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate names in {names}")
    return names


class Space(_Strict):
    """The search space; a fixed name (or a one-element list) is not searched."""

    divergence: str | list[str] = Field(default_factory=lambda: ["tv", "chi2", "kl", "hellinger"])
    estimator: str | list[str] = Field(default_factory=lambda: ["mc", "atomic", "binary"])
    alpha: AlphaRange | None = None
    radius: RadiusRange | None = None
    lr: LrRange | None = None
    settings: dict[str, Range | list[Any]] = Field(default_factory=dict)

    @property
    def divergences(self) -> list[str]:
        return [self.divergence] if isinstance(self.divergence, str) else list(self.divergence)

    @property
    def estimators(self) -> list[str]:
        return [self.estimator] if isinstance(self.estimator, str) else list(self.estimator)

    @field_validator("divergence")
    @classmethod
    def _divergences(cls, v: str | list[str]) -> str | list[str]:
        for name in _names(v):
            if name != ALPHA_FAMILY:
                registries.check_divergence(name)
        return v

    @field_validator("estimator")
    @classmethod
    def _estimators(cls, v: str | list[str]) -> str | list[str]:
        for name in _names(v):
            registries.check_estimator(name)
        return v

    @model_validator(mode="after")
    def _check(self) -> Space:
        has_family = ALPHA_FAMILY in self.divergences
        if has_family and self.alpha is None:
            raise ValueError("divergence 'alpha' needs an `alpha: {low, high}` range for a")
        if self.alpha is not None and not has_family:
            raise ValueError("`alpha` is set but 'alpha' is not among the divergences")
        for key, value in self.settings.items():
            if isinstance(value, list) and not value:
                raise ValueError(f"settings.{key}: an empty list of choices")
        if self.lr is not None and self.lr.key in self.settings:
            raise ValueError(f"settings.{self.lr.key}: already searched as lr")
        return self


class SamplerSpec(_Strict):
    kind: Literal["tpe", "random"] = "tpe"
    seed: int | None = None
    n_startup_trials: int = Field(default=4, ge=0)


class MedianPrunerSpec(_Strict):
    kind: Literal["median"] = "median"
    n_startup_trials: int = Field(default=2, ge=0)
    n_warmup_steps: int = Field(default=0, ge=0)
    interval_steps: int = Field(default=1, ge=1)


class HyperbandPrunerSpec(_Strict):
    kind: Literal["hyperband"]
    min_resource: int = Field(default=1, ge=1)
    max_resource: int | Literal["auto"] = "auto"
    reduction_factor: int = Field(default=3, ge=2)


class NoPrunerSpec(_Strict):
    kind: Literal["none"]


PrunerSpec = Annotated[
    MedianPrunerSpec | HyperbandPrunerSpec | NoPrunerSpec, Field(discriminator="kind")
]


class ObjectiveSpec(_Strict):
    """What a trial is scored by (maximised): a named MLflow metric, or the domain's avg@k."""

    metric: str | None = None


class IntermediateSpec(_Strict):
    """Training-time values reported to Optuna for pruning (MLflow step = Optuna step)."""

    metric: str = M.TRAIN_SCORE


class TuneSection(_Strict):
    study: str | None = Field(default=None, pattern=NAME_PATTERN)
    storage: str | None = None
    n_trials: int = Field(default=20, ge=1)
    #: trials running at once; default: the base spec's ``ray.max_concurrent`` (2)
    n_parallel: int | None = Field(default=None, ge=1)
    max_failures: int | None = Field(default=None, ge=0)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=MedianPrunerSpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    intermediate: IntermediateSpec = Field(default_factory=IntermediateSpec)
    space: Space = Field(default_factory=Space)
    poll_s: float = Field(default=2.0, gt=0)
    #: a RUNNING trial whose owner has not written a heartbeat for this long is orphaned.
    stale_after_s: float = Field(default=120.0, gt=0)
    top: int = Field(default=10, ge=1)
    #: one study per (divergence, estimator) of the space, named ``<study>.<cell>``
    per_cell: bool = False
    #: enqueue the base configuration (r_min 0.8, base lr...) as the first trial (gppo.default)
    default_first: bool = False

    @model_validator(mode="after")
    def _per_cell_searches_something(self) -> TuneSection:
        sp = self.space
        if self.per_cell and not (sp.radius or sp.lr or sp.settings or sp.alpha):
            raise ValueError("per_cell needs something to search per cell: radius, lr or settings")
        return self


class TuneSpec(_Strict):
    """A validated tuning spec: the grid base (raw, validated by the grid loader) and ``tune``."""

    name: str = Field(pattern=NAME_PATTERN)
    tune: TuneSection
    base: dict[str, Any]
    file: str = "<spec>"
    #: the command line's ``KEY=VALUE`` overrides applied to the file, as typed
    overrides: tuple[str, ...] = ()

    @property
    def study_name(self) -> str:
        return self.tune.study or self.name

    @property
    def n_parallel(self) -> int:
        if self.tune.n_parallel is not None:
            return self.tune.n_parallel
        return int((self.base.get("ray") or {}).get("max_concurrent", MAX_CONCURRENT))


class _Filtered:
    """A ValidationError look-alike without pydantic's union-branch tags in ``loc``."""

    def __init__(self, err: ValidationError) -> None:
        self._errors = err.errors(include_url=False)
        for e in self._errors:
            e["loc"] = tuple(p for p in e["loc"] if not (isinstance(p, str) and p in _TAGS))

    def errors(self, include_url: bool = False) -> list[ErrorDetails]:
        return self._errors


_TAGS = {"median", "hyperband", "none", "Range", "LrRange", "AlphaRange"}


def parse_tune_spec(raw: object, file: str = "<spec>") -> TuneSpec:
    """Validate a loaded YAML mapping (the grid base is checked later by :func:`check_spec`)."""
    if not isinstance(raw, dict):
        raise TuneSpecError(file, "", f"the spec must be a YAML mapping (got {type(raw).__name__})")
    for key in FORBIDDEN_BASE_KEYS:
        if key in raw:
            raise TuneSpecError(file, key, "not allowed in a tuning spec; set tune.space instead")
    if "tune" not in raw:
        raise TuneSpecError(file, "tune", "required field is missing (study, space, objective)")
    if "name" not in raw:
        raise TuneSpecError(file, "name", "required field is missing")
    base = {k: v for k, v in raw.items() if k != "tune"}
    try:
        return TuneSpec.model_validate(
            {"name": raw["name"], "tune": raw["tune"], "base": base, "file": file}
        )
    except ValidationError as err:
        e = from_validation_error(file, _Filtered(err), model=TuneSpec)
        raise TuneSpecError(e.file, e.path, e.message) from None


def load_tune_spec(path: str | Path, overrides: Sequence[str] = ()) -> TuneSpec:
    """Read and validate a tuning spec file (structure only; see :func:`check_spec`), edited by
    ``overrides`` (``KEY=VALUE`` tokens of the command line, :mod:`gppo.grid.overrides`: any
    path of the grid base or of ``tune``) as its file would be.

    A file that cannot be read, is not YAML or is empty gets the grid loader's own one-line
    error (:func:`gppo.grid.load.load_spec` raises it), as a :class:`TuneSpecError`."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        raw = None
    if raw is None:
        try:
            load_spec(path)
        except SpecError as err:
            raise TuneSpecError(err.file, err.path, err.message) from None
        raise TuneSpecError(str(path), "", "the file changed while it was read")
    if not overrides or not isinstance(raw, dict):
        return parse_tune_spec(raw, str(path))
    try:
        raw, applied = apply_texts(raw, overrides, roots=TUNE_ROOTS, forbidden=TUNE_FORBIDDEN)
    except SpecError as err:
        raise TuneSpecError(err.file, err.path, err.message) from None
    with attributed(applied):
        return parse_tune_spec(raw, str(path)).model_copy(update={"overrides": texts_of(applied)})


#: what a tuning spec's overrides may name besides the grid base's paths, and may not
TUNE_ROOTS: dict[str, Any] = {"tune": TuneSection}
TUNE_FORBIDDEN = {key: "not allowed in a tuning spec; set tune.space instead" for key in
                  FORBIDDEN_BASE_KEYS}  # fmt: skip


def with_overrides(spec: TuneSpec, *, address: str | None = None, **tune: Any) -> TuneSpec:
    """``spec`` with ``tune.<key>`` values (those not None) and ``ray.address`` replaced."""
    base = spec.base
    if address is not None:
        base = {**base, "ray": {**(base.get("ray") or {}), "address": address}}
    updates = {k: v for k, v in tune.items() if v is not None}
    return spec.model_copy(update={"tune": spec.tune.model_copy(update=updates), "base": base})
