"""Per-cell tuning and the default trial: how much does each cell gain when its radius is tuned?

* ``tune.default_first: true`` enqueues, as a study's first trial, the base configuration: the
  base ``calibration.r_min`` (0.8 by default; δ calibrated from it when the space searches δ) and
  the base values of the searched backend settings (``lr``...), where they lie in the searched
  ranges. That trial carries the user attr ``gppo.default``; its value is the untuned reference.
* ``tune.per_cell: true`` splits the space into one study per (divergence, estimator) of the
  space, named ``<study>.<cell>`` (e.g. ``tune-quickstart.kl-atomic``), each searching the
  remaining parameters (radius, lr, settings; ``a`` for the alpha family). They run one after the
  other, each with ``n_trials`` and ``n_parallel``; :func:`cell_summary` tabulates each cell's
  default value, best value and gain.
"""

from __future__ import annotations

from typing import Any, cast

import optuna
from optuna.trial import FrozenTrial, TrialState

from gppo.cell import cell_id
from gppo.sweep.tuning.attrs import CONFIG
from gppo.sweep.tuning.spec import ALPHA_FAMILY, Range, TuneSpec

DEFAULT_ATTR = "gppo.default"


def cell_specs(spec: TuneSpec) -> list[TuneSpec]:
    """The spec itself, or (``per_cell``) one spec per (divergence, estimator) of the space."""
    if not spec.tune.per_cell:
        return [spec]
    out = []
    for div in spec.tune.space.divergences:
        for est in spec.tune.space.estimators:
            space = spec.tune.space.model_copy(
                update={
                    "divergence": div,
                    "estimator": est,
                    "alpha": spec.tune.space.alpha if div == ALPHA_FAMILY else None,
                }
            )
            study = f"{spec.study_name}.{cell_id(div, est)}"
            tune = spec.tune.model_copy(update={"space": space, "study": study, "per_cell": False})
            out.append(spec.model_copy(update={"tune": tune}))
    return out


def _lookup(section: dict[str, Any], key: str) -> Any:
    node: Any = section
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _inside(value: Any, r: Range) -> bool:
    try:
        return r.low <= float(value) <= r.high
    except (TypeError, ValueError):
        return False


def default_params(spec: TuneSpec) -> dict[str, Any]:
    """Optuna params of the base configuration (only those inside the searched ranges)."""
    from gppo.backends.base import get_backend
    from gppo.grid import registries
    from gppo.grid.load import spec_from_yaml

    space = spec.tune.space
    params: dict[str, Any] = {}
    base = spec_from_yaml(spec.base, spec.file)
    r_min = base.calibration.r_min
    if space.radius is not None:
        radius: tuple[str, float] | None = None
        if space.radius.param == "r_min":
            radius = "r_min", r_min
        elif len(space.divergences) == 1 and space.divergences[0] != ALPHA_FAMILY:
            radius = "delta", registries.calibrate(space.divergences[0], r_min)
        if radius is not None and space.radius.low <= radius[1] <= space.radius.high:
            params[radius[0]] = radius[1]
    settings = get_backend(base.backend).validate_settings(base.settings).model_dump(mode="json")
    ranges: dict[str, Range | list[Any]] = dict(space.settings)
    if space.lr is not None:
        ranges["lr"] = space.lr
    for name, r in ranges.items():
        key = space.lr.key if name == "lr" and space.lr is not None else name
        value = _lookup(settings, key)
        if isinstance(r, list):
            if value in r:
                params[name] = value
        elif value is not None and _inside(value, r):
            params[name] = int(value) if r.int else float(value)
    return params


def enqueue_default(spec: TuneSpec, study: optuna.Study) -> bool:
    """Enqueue the default trial into a study that has no trial yet; True when enqueued."""
    if not spec.tune.default_first or study.get_trials(deepcopy=False):
        return False
    study.enqueue_trial(default_params(spec), user_attrs={DEFAULT_ATTR: True})
    return True


def _value(trial: FrozenTrial) -> float:
    """A COMPLETE trial's value (Optuna types it ``float | None`` for every state)."""
    return cast(float, trial.value)


def cell_summary(studies: list[tuple[TuneSpec, optuna.Study]]) -> list[dict[str, Any]]:
    """Per study (cell): default value, best value, gain = best - default, best config."""
    rows = []
    for spec, study in studies:
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        default = next((t for t in trials if t.user_attrs.get(DEFAULT_ATTR)), None)
        best = max(trials, key=_value, default=None)
        rows.append(
            {
                "study": spec.study_name,
                "complete": len(trials),
                "default": default.value if default else None,
                "best": best.value if best else None,
                "gain": (_value(best) - _value(default)) if best and default else None,
                "best_config": best.user_attrs.get(CONFIG, "") if best else "",
            }
        )
    return rows
