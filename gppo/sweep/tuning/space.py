"""Search space → Optuna parameters → one grid spec with a single cell (pure, no I/O).

A trial is one point of the design space. :func:`suggest` draws it from an Optuna trial (ask);
:func:`trial_spec` builds its :class:`~gppo.grid.schema.GridSpec` (the base spec, read once by
the grid loader, with the trial's cell, radius and settings put in) whose expansion is exactly one
cell (the first seed of the base spec), so a trial goes through the grid's validation and
expansion, the backend and the dispatcher like any sweep cell. The same spec with the base seeds
is the best configuration's ready-to-launch grid spec (:func:`best_spec`; :func:`best_grid` is it
in its YAML shape, for ``best.yaml``).

Optuna parameter names: ``divergence``, ``estimator`` (categorical, only when there is a choice),
``alpha`` (the ``a`` of ``alpha:<a>``, only when that family was drawn), ``r_min`` or ``delta``
(``delta_<divergence>`` when the divergence varies, since δ scales differ per divergence), ``lr``,
and each ``settings`` key as written.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gppo.cell import cell_id, match_cell_key
from gppo.grid import registries
from gppo.grid.axes import check_path, put, spec_path
from gppo.grid.load import SETTINGS, backend_of, spec_from_yaml, spec_to_yaml
from gppo.grid.schema import GridSpec
from gppo.grid.schema import seed_list as schema_seed_list
from gppo.grid.spec_errors import from_validation_error
from gppo.objectives.defaults import grid_label
from gppo.sweep.tuning.spec import ALPHA_FAMILY, RadiusRange, Range, Space, TuneSpec

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class TrialConfig:
    """One point of the design space, resolved to grid-spec values."""

    divergence: str  # full name, e.g. "kl" or "alpha:0.734"
    estimator: str
    radius_param: str | None = None  # "r_min" | "delta"
    radius: float | None = None
    lr_key: str | None = None
    lr: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        parts = [grid_label(self.divergence, self.estimator)]
        if self.radius_param:
            parts.append(f"{self.radius_param}={self.radius:.4g}")
        if self.lr_key:
            parts.append(f"{self.lr_key}={self.lr:.3g}")
        parts += [f"{k}={v}" for k, v in self.settings.items()]
        return " ".join(parts)


def alpha_name(a: float) -> str:
    """``alpha:<a>`` with 4 significant digits, never exactly at the singular a = 0 or 1."""
    text = f"{a:.4g}"
    if float(text) == 1.0:
        text = "0.9999" if a < 1 else "1.0001"
    elif float(text) == 0.0:
        text = "-0.0001" if a < 0 else "0.0001"
    return f"alpha:{text}"


def _suggest_range(trial: Any, name: str, r: Range) -> float | int:
    if r.int:
        return trial.suggest_int(name, int(r.low), int(r.high), log=r.log)
    return trial.suggest_float(name, r.low, r.high, log=r.log)


def _pick(trial: Any, name: str, choices: list[Any]) -> Any:
    return choices[0] if len(choices) == 1 else trial.suggest_categorical(name, choices)


def suggest(trial: optuna.trial.BaseTrial, space: Space) -> TrialConfig:
    """Draw one configuration from an Optuna trial (or a FixedTrial / FrozenTrial-like object)."""
    family = _pick(trial, "divergence", space.divergences)
    divergence = family
    if family == ALPHA_FAMILY:
        assert space.alpha is not None  # the spec validator guarantees it
        divergence = alpha_name(float(_suggest_range(trial, "alpha", space.alpha)))
    estimator = _pick(trial, "estimator", space.estimators)
    radius_param = radius = None
    if space.radius is not None:
        radius_param = space.radius.param
        name: str = radius_param
        if radius_param == "delta" and len(space.divergences) > 1:
            name = f"delta_{family}"
        radius = trial.suggest_float(
            name, space.radius.low, space.radius.high, log=space.radius.log
        )
    lr_key = lr = None
    if space.lr is not None:
        lr_key, lr = space.lr.key, float(_suggest_range(trial, "lr", space.lr))
    settings = {
        key: (
            _pick(trial, key, value)
            if isinstance(value, list)
            else _suggest_range(trial, key, value)
        )
        for key, value in space.settings.items()
    }
    return TrialConfig(divergence, estimator, radius_param, radius, lr_key, lr, settings)


def config_from_params(params: dict[str, Any], space: Space) -> TrialConfig:
    """Rebuild a trial's configuration from its stored Optuna params (for reports, best spec)."""
    import optuna

    return suggest(optuna.trial.FixedTrial(params), space)


def _grid_spec(spec: TuneSpec, cfg: TrialConfig, *, seeds: Any, name: str) -> GridSpec:
    """The base spec as a :class:`GridSpec` of one cell, ``cfg``'s, on ``seeds`` (raises
    :class:`SpecError` naming the base's field where the base or the trial's values are bad)."""
    from pydantic import ValidationError

    base = spec_from_yaml({**spec.base, "name": name}, spec.file)
    divergence = registries.check_divergence(cfg.divergence)  # as the grid spells it
    seeds_of = schema_seed_list(seeds)
    cell = cell_id(divergence, cfg.estimator)

    def mine(key: str) -> bool:  # the override and δ keys that name this trial's cell
        return key == divergence or match_cell_key(key, {cell}, seeds_of) is not None

    cal = base.calibration
    calibration: dict[str, Any] = {k: getattr(cal, k) for k in cal.model_fields_set}
    if "delta" in calibration:
        calibration["delta"] = {k: v for k, v in cal.delta.items() if mine(k)}
    if cfg.radius_param == "r_min":
        calibration["r_min"] = cfg.radius
        calibration.pop("delta", None)  # an explicit δ would override the tuned r_min
    elif cfg.radius_param == "delta":
        calibration["delta"] = {divergence: cfg.radius}
    settings = copy.deepcopy(base.settings)
    fields: dict[str, Any] = {k: getattr(base, k) for k in base.model_fields_set}
    fields.update(
        grid={"divergences": [divergence], "estimators": [cfg.estimator]},
        baselines=[],
        reference=grid_label(divergence, cfg.estimator),
        seeds=seeds,
        settings=settings,
        overrides={k: v for k, v in base.overrides.items() if mine(k)},
    )
    fields.pop("baseline_params", None)
    if calibration:
        fields["calibration"] = calibration
    searched = {cfg.lr_key: cfg.lr} if cfg.lr_key is not None else {}
    for key, value in {**searched, **cfg.settings}.items():  # the grid's own dotted paths
        put(fields, base.backend, search_path(spec, key), value)
    try:
        return GridSpec.model_validate(fields)
    except ValidationError as exc:
        raise from_validation_error(
            spec.file, exc, model=GridSpec, keys={SETTINGS: base.backend}
        ) from None


def search_path(spec: TuneSpec, key: str) -> str:
    """The spec path a searched key names (:func:`gppo.grid.axes.spec_path`), checked by the
    axes' parser (:func:`gppo.grid.axes.check_path`: what an axis may vary, a search may)."""
    from gppo.backends.base import get_backend

    backend = backend_of(spec.base)
    path = spec_path(key, backend)
    fields = tuple(get_backend(backend).settings_model.model_fields)
    lr = spec.tune.space.lr
    where = "tune.space.lr" if lr is not None and key == lr.key else f"tune.space.settings.{key}"
    check_path(path, backend, fields, spec.file, where)
    return path


def trial_spec(spec: TuneSpec, cfg: TrialConfig, number: int) -> GridSpec:
    """The grid spec of one trial: one cell, on the base spec's first seed."""
    seeds = spec_from_yaml(spec.base, spec.file).seed_list[:1]
    return _grid_spec(spec, cfg, seeds=seeds, name=f"{spec.study_name}-t{number}")


def best_spec(spec: TuneSpec, cfg: TrialConfig) -> GridSpec:
    """A ready-to-launch grid spec of the best configuration, with the base spec's seeds."""
    seeds = spec_from_yaml(spec.base, spec.file).seeds
    return _grid_spec(spec, cfg, seeds=seeds, name=f"{spec.study_name}-best")


def trial_grid(spec: TuneSpec, cfg: TrialConfig, number: int) -> dict[str, Any]:
    """:func:`trial_spec` in its YAML shape."""
    return spec_to_yaml(trial_spec(spec, cfg, number))


def best_grid(spec: TuneSpec, cfg: TrialConfig) -> dict[str, Any]:
    """:func:`best_spec` in its YAML shape (what ``best.yaml`` holds)."""
    return spec_to_yaml(best_spec(spec, cfg))


def _around(best: float, low: float, high: float, factor: float) -> list[float]:
    """``best / factor``, ``best``, ``best * factor`` (4 significant digits) kept in
    ``[low, high]``; ``best`` always in, no value twice, ascending."""
    out = {float(f"{v:.4g}") for v in (best / factor, best * factor) if low <= v <= high}
    return sorted(out | {float(f"{best:.4g}")})


#: the step of the axes around the best point: ``lr`` x/÷ 2, the radius x/÷ 1.1
LR_FACTOR, RADIUS_FACTOR = 2.0, 1.1


def best_axes_grid(spec: TuneSpec, cfg: TrialConfig) -> dict[str, Any]:
    """:func:`best_grid` with ``axes:`` around the best point: each searched learning rate and
    radius at best ÷ step, best, best x step (inside the searched range), so a launch shows how
    the best cell responds near its optimum (the response figure, the rank summary)."""
    grid = best_grid(spec, cfg)
    space, backend = spec.tune.space, backend_of(spec.base)
    axes: dict[str, list[float]] = {}
    if cfg.radius_param == "r_min" and cfg.radius is not None and space.radius is not None:
        r = space.radius
        axes["calibration.r_min"] = _around(cfg.radius, r.low, r.high, RADIUS_FACTOR)
    elif cfg.radius_param == "delta" and cfg.radius is not None and space.radius is not None:
        r = space.radius
        axes[f"calibration.delta.{cfg.divergence}"] = _around(
            cfg.radius, r.low, r.high, RADIUS_FACTOR
        )
        grid.get("calibration", {}).pop("delta", None)  # the axis sets it
    if cfg.lr_key is not None and cfg.lr is not None and space.lr is not None:
        path = spec_path(cfg.lr_key, backend)
        axes[path] = _around(cfg.lr, space.lr.low, space.lr.high, LR_FACTOR)
    if axes:
        grid["name"] = f"{spec.study_name}-around"
        grid["axes"] = axes
    return grid


def _end(r: Range | RadiusRange | list[Any], end: str) -> Any:
    """The ``low`` or ``high`` end of a range (first or last of a list of choices)."""
    if isinstance(r, list):
        return r[0] if end == "low" else r[-1]
    value = getattr(r, end)
    return int(value) if getattr(r, "int", False) else value


def corner_configs(space: Space) -> list[TrialConfig]:
    """Every categorical combination at both ends of the numeric ranges (for up-front checks)."""
    out = []
    ranges: dict[str, Any] = {"alpha": space.alpha, "lr": space.lr, **space.settings}
    for end in ("low", "high"):
        params = {name: _end(r, end) for name, r in ranges.items() if r is not None}
        for family in space.divergences:
            if space.radius is not None:  # under each name suggest() may ask for it
                radius = _end(space.radius, end)
                params.update({"r_min": radius, "delta": radius, f"delta_{family}": radius})
            for est in space.estimators:
                fixed = {**params, "divergence": family, "estimator": est}
                out.append(config_from_params(fixed, space))
    return out
