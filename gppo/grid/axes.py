"""Axes of a sweep: dotted paths into the spec, each with a list of values (pure, no I/O).

``axes: {calibration.r_min: [0.7, 0.8, 0.9], local.lr: [5.0e-5, 1.0e-4]}`` makes the sweep the
product of its cells, its seeds and every axis. The one parser and validator of a dotted path
(:func:`check_path`) and of an axis value (:func:`point_spec`: the value put in its place and
validated by the same models as a plain value there) is used by the grid expansion and the tuner.

Paths that vary (:data:`VARYING`): ``calibration.r_min``, ``calibration.delta.<divergence or
cell>``, ``objective.ratio_bounds|dual_clip|loss_agg_mode``, ``eval.k`` and every field of the
backend's own section (``local.lr``, ``verl.group_size``, ``trl.<field>``, nested with dots).
What identifies or runs the sweep (:data:`FIXED`: ``name``, ``backend``, ``tracking.*``,
``ray.*``, ``grid.*``, ``seeds``, ...) cannot vary within it and is refused.

Rules (each one line, :class:`SpecError`, exit 2 at ``plan``):
- a list of at least one value, no value twice; at most :data:`MAX_RUNS` runs in all;
- a field set for one cell elsewhere (``overrides.<cell>.<same field>``, ``overrides.<cell>.delta``
  or ``calibration.delta`` under an r_min axis) is refused: the axis would not move that cell;
- an axis applies to a cell when its value changes the cell's resolved settings; one that does
  not (r_min for a baseline) does not multiply the cell: one set of runs stands at every point.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from gppo.grid.schema import GridSpec
from gppo.grid.spec_errors import SpecError, from_validation_error, short

if TYPE_CHECKING:
    from gppo.cell import Cell

#: the most runs (cells x axis points x seeds) one spec may expand to
MAX_RUNS = 10_000
#: spec sections whose fields an axis may vary, with the fields allowed (the backend's own
#: section, not listed: every field)
VARYING: dict[str, tuple[str, ...]] = {
    "calibration": ("r_min", "delta"),
    "objective": ("ratio_bounds", "dual_clip", "loss_agg_mode"),
    "eval": ("k",),
}
#: what identifies or runs a sweep, never an axis
FIXED = (
    "name",
    "backend",
    "tracking",
    "ray",
    "retries",
    "grid",
    "seeds",
    "baselines",
    "baseline_params",
    "reference",
    "benchmarks",
    "overrides",
    "axes",
    "select",
)


#: the fields of VARYING whose value is keyed one level further down (per divergence or cell)
KEYED = {"calibration.delta": "<divergence or cell>"}


def allowed_text(backend: str) -> str:
    """What an axis may name (:data:`VARYING`, then the backend's fields), for error lines."""
    paths = [f"{section}.{f}" for section, fields in VARYING.items() for f in fields]
    return ", ".join(
        [*(f"{p}.{KEYED[p]}" if p in KEYED else p for p in paths), f"{backend}.<field>"]
    )


def check_path(
    path: object, backend: str, fields: tuple[str, ...], file: str, where: str
) -> list[str]:
    """The parts of a valid dotted ``path`` (raises :class:`SpecError` at ``where``).

    ``fields``: the backend section's top-level fields (its settings model's)."""
    if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
        raise SpecError(file, where, f"{short(path)} is not a dotted path; allowed: "
                        f"{allowed_text(backend)}")  # fmt: skip
    parts = path.split(".")
    root = parts[0]
    if root in FIXED:
        raise SpecError(
            file,
            where,
            f"{path!r} cannot vary within one sweep (it names or runs the sweep); allowed: "
            f"{allowed_text(backend)}",
        )
    if root == backend:
        if len(parts) < 2 or parts[1] not in fields:
            raise SpecError(
                file,
                where,
                f"unknown key {'.'.join(parts[1:2]) or '(none)'!r} of the {backend} section; "
                f"allowed: {', '.join(fields)}",
            )
        return parts
    if root in VARYING:
        allowed = VARYING[root]
        ok = len(parts) == 2 and parts[1] in allowed and parts[1] != "delta"
        ok = ok or (root == "calibration" and len(parts) == 3 and parts[1] == "delta")
        if not ok:
            names = ", ".join(
                f"{root}.{f}" if f != "delta" else f"{root}.delta.<divergence or cell>"
                for f in allowed
            )
            raise SpecError(file, where, f"{path!r} cannot vary; allowed under {root}: {names}")
        return parts
    raise SpecError(file, where, f"unknown path {path!r}; allowed: {allowed_text(backend)}")


def spec_path(key: str, backend: str) -> str:
    """A search key as a spec path: a path that starts at a section of the spec as it is
    (``objective.loss_agg_mode``), any other key one of the backend's section (``lr`` ->
    ``local.lr``, ``rollout.n`` -> ``verl.rollout.n``): the tuner's keys."""
    root = key.split(".", 1)[0]
    return key if root in VARYING or root in FIXED or root == backend else f"{backend}.{key}"


def put(data: dict[str, Any], backend: str, path: str, value: object) -> None:
    """Set ``value`` at the dotted ``path`` of ``data``, a spec's fields as :class:`GridSpec`
    names them (the backend's section is ``settings``); the dicts on the way are copied."""
    parts = path.split(".")
    node = data
    for p in ["settings" if parts[0] == backend else parts[0], *parts[1:-1]]:
        child: Any = node.get(p)
        if hasattr(child, "model_dump"):  # a section given as a model: its fields as given
            child = child.model_dump(exclude_unset=True)
        node[p] = child = dict(child) if isinstance(child, dict) else {}
        node = child
    node[parts[-1]] = value


def spec_data(spec: GridSpec) -> dict[str, Any]:
    """``spec`` as the fields it was given (what :func:`point_spec` starts from)."""
    return spec.model_dump(exclude_unset=True, exclude={"axes", "select"})


def point_spec(
    base: dict[str, Any], backend: str, point: Mapping[str, object], file: str, where: str = ""
) -> GridSpec:
    """The spec (without axes) of one axis point: each value put at its path in ``base`` (from
    :func:`spec_data`) and validated as a plain value there; errors are named at ``where``."""
    from pydantic import ValidationError

    data = dict(base)
    for path, value in point.items():
        put(data, backend, path, value)
    try:
        return GridSpec.model_validate(data)
    except ValidationError as exc:
        err = from_validation_error(file, exc, model=GridSpec, keys={"settings": backend})
        raise SpecError(file, where or err.path, err.message) from None


def check_values(spec: GridSpec, file: str) -> dict[str, list[Any]]:
    """Every axis's path and values, checked (list, not empty, no duplicate, each value valid in
    place); the backend section's values are validated by its settings model."""
    from pydantic import ValidationError

    from gppo.backends.base import get_backend

    backend = get_backend(spec.backend)
    fields = tuple(backend.settings_model.model_fields)
    base = spec_data(spec)
    out: dict[str, list[Any]] = {}
    for path, values in spec.axes.items():
        where = f"axes.{path}"
        parts = check_path(path, spec.backend, fields, file, where)
        if not isinstance(values, list) or not values:
            raise SpecError(
                file, where, f"must be a non-empty list of values (got {short(values)})"
            )
        seen: list[Any] = []
        for i, value in enumerate(values):
            if value in seen:
                raise SpecError(file, f"{where}[{i}]", f"duplicate value {short(value)}")
            seen.append(value)
            one = point_spec(base, spec.backend, {path: value}, file, f"{where}[{i}]")
            if parts[0] == spec.backend:
                try:
                    backend.validate_settings(one.settings)
                except ValidationError as exc:
                    err = from_validation_error(file, exc)
                    raise SpecError(file, f"{where}[{i}]", err.message) from None
        out[path] = list(values)
    _check_names(spec, file)
    _check_clashes(spec, file)
    return out


def short_names(paths: list[str]) -> dict[str, str]:
    """Each path's name in cell ids: its last part, or the whole path (dots as ``_``) where two
    axes share a last part."""
    last = [p.rsplit(".", 1)[-1] for p in paths]
    return {
        p: (n if last.count(n) == 1 else p.replace(".", "_"))
        for p, n in zip(paths, last, strict=True)
    }


def _check_names(spec: GridSpec, file: str) -> None:
    from gppo.cell import axis_value_text

    for path, values in spec.axes.items():
        texts = [axis_value_text(v) for v in values]
        for i, t in enumerate(texts):
            if texts.index(t) != i:
                raise SpecError(
                    file,
                    f"axes.{path}[{i}]",
                    f"{short(values[i])} and {short(values[texts.index(t)])} would give the same "
                    f"cell id ({t!r}); use values that differ",
                )
    for path in spec.select:
        if path not in spec.axes:
            raise SpecError(
                file,
                "select",
                f"{path!r} is not an axis; allowed: {', '.join(spec.axes) or 'none (no axes)'}",
            )


def _check_clashes(spec: GridSpec, file: str) -> None:
    """An axis over a field that an override or an explicit δ also sets is refused."""
    for path in spec.axes:
        parts = path.split(".")
        for key, o in spec.overrides.items():
            if parts[0] == spec.backend and _has(o.settings, parts[1:]):
                raise SpecError(
                    file,
                    f"overrides.{key}.{path}",
                    f"also an axis (axes.{path}); set a field in one place: the axis, or the "
                    "override without the axis",
                )
            if parts[0] == "objective" and parts[1] in o.params:
                raise SpecError(
                    file,
                    f"overrides.{key}.params.{parts[1]}",
                    f"also an axis (axes.{path}); set a field in one place",
                )
            if parts[0] == "calibration" and o.delta is not None:
                raise SpecError(
                    file,
                    f"overrides.{key}.delta",
                    f"an explicit δ would hold this cell still under axes.{path}; drop one",
                )
        if path == "calibration.r_min" and spec.calibration.delta:
            key = next(iter(spec.calibration.delta))
            raise SpecError(
                file,
                f"calibration.delta.{key}",
                "an explicit δ would hold its cells still under axes.calibration.r_min (δ follows "
                "r_min per divergence); drop one",
            )
        if parts[:2] == ["calibration", "delta"] and parts[2] in spec.calibration.delta:
            raise SpecError(
                file,
                f"calibration.delta.{parts[2]}",
                f"also an axis (axes.{path}); set a field in one place",
            )


def _has(section: dict[str, Any], parts: list[str]) -> bool:
    node: Any = section
    for p in parts:
        if not isinstance(node, dict) or p not in node:
            return False
        node = node[p]
    return True


def points(axes: Mapping[str, Sequence[object]]) -> Iterator[dict[str, object]]:
    """Every axis point, ``{path: value}``, the first axis varying slowest."""
    paths = list(axes)
    for combo in itertools.product(*(axes[p] for p in paths)):
        yield dict(zip(paths, combo, strict=True))


def _point_key(values: Iterable[Any]) -> str:
    """A hashable key of a point's values: list values (``objective.ratio_bounds``) included."""
    return json.dumps(list(values), sort_keys=True)


def expand_axes(
    spec: GridSpec, file: str, expand_one: Callable[[GridSpec], list[Cell]]
) -> list[Cell]:
    """The cells of a spec with axes: ``expand_one`` (a spec without axes -> its cells) at each
    axis point; a cell gets the point's values of the axes that move it (its ``axes`` and id
    suffix, :func:`gppo.cell.axis_suffix`), and the copies an axis does not move are one cell.
    Order: point by point, each point's cells in the expansion's order."""
    import dataclasses

    from gppo.backends.base import get_backend
    from gppo.cell import axis_suffix, cell_id

    axes = check_values(spec, file)
    if spec.select and not get_backend(spec.backend).logs_selection_score:
        raise SpecError(
            file,
            "select",
            f"backend {spec.backend!r} logs no held-out selection score (a split disjoint from "
            "the reported benchmarks), so a selection would be made on the reported numbers; "
            "select needs a backend that logs one (local)",
        )
    base = spec_data(spec)
    all_points = list(points(axes))
    first = expand_one(point_spec(base, spec.backend, all_points[0], file))
    total = len(first) * len(all_points)
    if total > MAX_RUNS:
        sizes = " x ".join(str(len(v)) for v in axes.values())
        raise SpecError(
            file,
            "axes",
            f"{len(first)} runs a point (cells x seeds) x {sizes} axis values = {total:,} runs, "
            f"past the limit of "
            f"{MAX_RUNS:,} runs per spec; allowed: fewer values or cells",
        )
    paths = list(axes)
    index = {_point_key(p.values()): i for i, p in enumerate(all_points)}
    per_point = [first] + [
        expand_one(point_spec(base, spec.backend, p, file)) for p in all_points[1:]
    ]
    names = short_names(paths)
    moved: list[set[str]] = []  # per cell position: the axes that change it
    for j in range(len(first)):
        found = set()
        for a, path in enumerate(paths):
            for i, p in enumerate(all_points):
                other = list(p.values())
                other[a] = axes[path][0]
                if per_point[i][j].to_json() != per_point[index[_point_key(other)]][j].to_json():
                    found.add(path)
                    break
        moved.append(found)
    out, seen = [], set()
    for p, cells in zip(all_points, per_point, strict=True):
        for j, cell in enumerate(cells):
            point = {k: v for k, v in p.items() if k in moved[j]}
            suffix = axis_suffix(point, names)
            if cell.method == "gppo":
                divergence = cast(str, cell.divergence)  # a gppo cell's is set
                cid = cell_id(divergence, cell.estimator, cell.seed, suffix)
            else:
                cid = cell_id(cell.method, seed=cell.seed, axes=suffix)
            if cid in seen:
                continue
            seen.add(cid)
            new = dataclasses.replace(cell, id=cid, axes=point, select=bool(spec.select))
            out.append(new.keep_settings_model(cell.settings_model))
    return out


def plain_values(spec: GridSpec) -> dict[str, Any]:
    """The report's home point: each axis's value in the spec without the axis, as resolved
    (defaults included: ``calibration.r_min`` 0.8, ``eval.k`` 8, a backend field its settings
    model's default, e.g. ``local.lr`` 1e-4 where the spec's ``local:`` sets none), or, where
    the axis's values do not include that value, the axis's first value."""
    from gppo.backends.base import get_backend

    data = spec.model_dump(mode="json", exclude={"axes", "select", "settings"})
    settings = get_backend(spec.backend).validate_settings(spec.settings)
    data[spec.backend] = settings.model_dump(mode="json")
    out = {}
    for path, values in spec.axes.items():
        node: Any = data
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[path] = next((v for v in values if v == node), values[0])
    return out
