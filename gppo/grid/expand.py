"""Deterministic expansion of a :class:`GridSpec` into :class:`Cell` objects.

Cells, in the order divergences × estimators × seeds as written, then baselines × seeds, with
the ids of :func:`gppo.cell.cell_id` (``kl-atomic-s0``, ``alpha0.5-mc-s1``, ``gspo-s0``); a spec's
override and δ keys are matched to them by :func:`gppo.cell.match_cell_key`. A spec with ``axes``
is expanded at each axis point (:func:`gppo.grid.axes.expand_axes`).

Sweep id: ``<name>-<hash8>`` where the hash covers only what identifies the sweep (name, backend,
experiment), NOT the cells' settings. Relaunching the same spec therefore finds the same sweep,
and editing or adding cells keeps the sweep: each cell's run carries ``Cell.config_hash`` (tag
``gppo.cell_hash``), so a cell whose settings changed no longer matches its old runs and gets a
new run, while unchanged finished cells are kept.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from gppo.cell import Cell, Resources, cell_id, match_cell_key
from gppo.grid import registries
from gppo.grid.schema import GridSpec, Override, ResourceSpec
from gppo.grid.spec_errors import SpecError, from_validation_error
from gppo.objectives.aggregation import check_agg_mode
from gppo.objectives.checks import check_dual_clip, check_ratio_bounds

#: loss parameters an override may set on a gppo grid cell (δ has its own ``delta`` key), each
#: checked by the objectives library's own rule
GPPO_OVERRIDABLE = {
    "ratio_bounds": check_ratio_bounds,
    "dual_clip": check_dual_clip,
    "loss_agg_mode": check_agg_mode,
}


def sweep_id(spec: GridSpec) -> str:
    """``<name>-<hash8>`` of (name, backend, experiment): stable while cells change."""
    key = json.dumps([spec.name, spec.backend, spec.experiment], separators=(",", ":"))
    return f"{spec.name}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _resources(r: ResourceSpec) -> Resources:
    return Resources(
        num_cpus=r.num_cpus,
        num_gpus=r.num_gpus,
        memory_gb=r.memory_gb,
        custom=tuple(sorted(r.custom.items())),
    )


@dataclass(frozen=True)
class _Base:
    """One cell before seeds: id without ``-sN`` and its coordinates."""

    id: str
    method: str
    divergence: str | None
    estimator: str | None


class _Expander:
    def __init__(self, spec: GridSpec, source: str) -> None:
        from pydantic import ValidationError

        from gppo.backends.base import get_backend

        self.spec, self.source = spec, source
        self.backend = get_backend(spec.backend)
        try:
            self.settings_model = self.backend.validate_settings(spec.settings)
        except ValidationError as exc:
            raise from_validation_error(source, exc, prefix=(spec.backend,)) from None
        self.settings = self.settings_model.model_dump(mode="json")
        self.domain = self.settings.get("domain")
        self._settings_cache: dict[str, tuple[dict[str, Any], Any]] = {}
        self._params_cache: dict[str, dict[str, Any]] = {}

    def error(self, path: str, message: str) -> SpecError:
        return SpecError(self.source, path, message)

    def benchmarks(self) -> tuple[str, ...]:
        spec = self.spec
        if not spec.benchmarks:
            return tuple(self.backend.default_benchmarks(self.settings_model))
        known = self.backend.known_benchmarks(self.settings_model)
        if known is not None:
            for i, b in enumerate(spec.benchmarks):
                if b not in known:
                    raise self.error(
                        f"benchmarks[{i}]", f"unknown benchmark {b!r}; known: {', '.join(known)}"
                    )
        return tuple(spec.benchmarks)

    def bases(self) -> list[_Base]:
        g = self.spec.grid
        out = [_Base(cell_id(d, e), "gppo", d, e) for d in g.divergences for e in g.estimators]
        out += [_Base(b, b, None, None) for b in self.spec.baselines]
        return out

    def check_keys(self, bases: list[_Base], seeds: list[int]) -> None:
        spec = self.spec
        base_ids = {b.id for b in bases}
        seed_set = set(seeds)

        def known(key: str) -> bool:
            return match_cell_key(key, base_ids, seed_set) is not None

        examples = ", ".join(sorted(base_ids)[:6]) + (", ..." if len(base_ids) > 6 else "")
        for key in spec.overrides:
            if not known(key):
                raise self.error(
                    f"overrides.{key}",
                    f"no cell {key!r} in this grid; keys are cell ids with or without -s<seed> "
                    f"(e.g. {examples})",
                )
        divs = set(spec.grid.divergences)
        for key in spec.calibration.delta:
            if key not in divs and not known(key):
                raise self.error(
                    f"calibration.delta.{key}",
                    f"{key!r} is neither a divergence of the grid ({', '.join(spec.grid.divergences)}) "
                    "nor a cell id",
                )
        ref = spec.reference
        grid_refs = {f"{d}/{e}" for d in divs for e in spec.grid.estimators}
        if ref not in grid_refs and ref not in spec.baselines:
            raise self.error(
                "reference",
                f"reference {ref!r} is not a cell of this grid; allowed: <divergence>/<estimator> "
                f"of the grid (e.g. {sorted(grid_refs)[0]}) or a listed baseline",
            )

    def cell_settings(self, path: str, overrides: list[Override]) -> tuple[dict[str, Any], Any]:
        """The cell's settings after its overrides: (plain JSON values, validated model)."""
        extra: dict[str, Any] = {}
        for o in overrides:
            extra = _merge(extra, o.settings)
        if not extra:
            return self.settings, self.settings_model
        key = json.dumps(extra, sort_keys=True, default=str)
        if key not in self._settings_cache:
            from pydantic import ValidationError

            try:
                model = self.backend.validate_settings(_merge(self.spec.settings, extra))
            except ValidationError as exc:
                raise from_validation_error(
                    self.source, exc, prefix=("overrides", path, self.spec.backend)
                ) from None
            self._settings_cache[key] = (model.model_dump(mode="json"), model)
        return self._settings_cache[key]

    def loss_params(self, base: _Base, delta: float | None, extra: dict, path: str) -> dict:
        obj = self.spec.objective
        if base.method == "gppo":
            params: dict[str, Any] = {
                "divergence": base.divergence,
                "estimator": base.estimator,
                "delta": delta,
                "ratio_bounds": list(obj.ratio_bounds) if obj.ratio_bounds else None,
                "dual_clip": obj.dual_clip,
            }
            for k, value in extra.items():
                if k not in GPPO_OVERRIDABLE:
                    raise self.error(
                        f"overrides.{path}.params.{k}",
                        f"unknown parameter {k!r} for a gppo cell; allowed: "
                        f"{', '.join(GPPO_OVERRIDABLE)} (set delta with overrides.{path}.delta)",
                    )
                try:
                    GPPO_OVERRIDABLE[k](value)
                except ValueError as exc:
                    raise self.error(f"overrides.{path}.params.{k}", str(exc)) from None
            params.update(extra)
            return params
        given = _merge(self.spec.baseline_params.get(base.method, {}), extra)
        key = base.method + json.dumps(given, sort_keys=True, default=str)
        if key not in self._params_cache:
            try:
                self._params_cache[key] = registries.resolve_method_params(base.method, given)
            except ValueError as exc:
                where = f"overrides.{path}.params" if extra else f"baseline_params.{base.method}"
                raise self.error(where, str(exc)) from None
        return dict(self._params_cache[key])

    def delta(self, base: _Base, cell_id: str, overrides: list[Override]) -> float | None:
        if base.method != "gppo":
            return None
        for o in reversed(overrides):  # the seed-specific override wins
            if o.delta is not None:
                return o.delta
        table = self.spec.calibration.delta
        for key in (cell_id, base.id, base.divergence):
            if key in table:
                return table[key]
        return registries.calibrate(base.divergence, self.spec.calibration.r_min)

    def cells(self) -> list[Cell]:
        spec = self.spec
        seeds = spec.seed_list
        bases = self.bases()
        self.check_keys(bases, seeds)
        benchmarks = self.benchmarks()
        default_res = _resources(spec.ray.resources)
        agg = spec.objective.loss_agg_mode
        out: list[Cell] = []
        ovr = spec.overrides
        for base in bases:
            for seed in seeds:
                cid = cell_id(base.id, seed=seed)
                found = [(k, ovr[k]) for k in (base.id, cid) if k in ovr]
                overrides = [o for _, o in found]
                path = found[-1][0] if found else cid
                extra: dict[str, Any] = {}
                for o in overrides:
                    extra.update(o.params)
                res = next((o.resources for o in reversed(overrides) if o.resources), None)
                delta = self.delta(base, cid, overrides)
                params = self.loss_params(base, delta, extra, path)
                params.setdefault("loss_agg_mode", agg)
                settings, settings_model = self.cell_settings(path, overrides)
                out.append(
                    Cell(
                        id=cid,
                        method=base.method,
                        seed=seed,
                        loss_params=params,
                        backend=spec.backend,
                        settings=settings,
                        benchmarks=benchmarks,
                        eval_k=spec.eval.k,
                        resources=_resources(res) if res else default_res,
                    ).keep_settings_model(settings_model)
                )
        return out


def expand(spec: GridSpec, source: str = "<spec>") -> list[Cell]:
    """All cells of ``spec`` in a deterministic order (raises :class:`SpecError`)."""
    try:
        if spec.axes or spec.select:
            from gppo.grid.axes import expand_axes

            return expand_axes(spec, source, lambda one: _Expander(one, source).cells())
        return _Expander(spec, source).cells()
    except SpecError:
        raise
    except (KeyError, ValueError) as exc:  # a registry refusing a name the schema let through
        raise SpecError(source, "", str(exc.args[0]) if exc.args else str(exc)) from None
