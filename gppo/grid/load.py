"""Reading a spec file: its YAML shape <-> :class:`GridSpec`, and the loaded, expanded spec
(:class:`Plan`, :func:`load_plan`) with the rows ``gppo-sweep plan`` shows (every error one
:class:`SpecError` line).

The YAML shape differs from :class:`GridSpec` in one place: the backend's own settings are a
section named after the backend (``local:``, ``verl:``, ``trl:``), at the top and in each
override, which :class:`GridSpec` and :class:`~gppo.grid.schema.Override` keep as ``settings``.
Only this module reads that shape: :func:`spec_from_yaml` (the loader, the tuner's base spec),
:func:`spec_to_yaml` (the report page's spec, the tuner's best spec) and :func:`backend_of` (the
backend a spec in its YAML shape names: the tuner's search keys are placed by it); errors name
the section as the file writes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gppo.cell import DEFAULT_BACKEND, Cell
from gppo.grid.expand import expand, sweep_id
from gppo.grid.schema import GridSpec
from gppo.grid.spec_errors import SpecError, from_validation_error

if TYPE_CHECKING:
    from gppo.grid.overrides import SpecOverride

#: the field of :class:`GridSpec` (and of an override) that holds the backend's own section
SETTINGS = "settings"
#: behaviour probabilities at which ``plan`` previews each cell's proximal region
PREVIEW_MUS = (0.01, 0.1, 0.5, 0.9)


def _section_from_yaml(raw: dict[str, Any], backend: Any, file: str, where: str) -> dict[str, Any]:
    """``raw`` with the backend's own section (``local:``) as ``settings`` (it must be a mapping)."""
    raw = dict(raw)
    if SETTINGS in raw:
        key = backend if isinstance(backend, str) else "<backend>"
        raise SpecError(
            file, f"{where}{SETTINGS}", f"unknown key {SETTINGS!r}; write the section as {key!r}"
        )
    if isinstance(backend, str) and backend in raw:
        section = raw.pop(backend)
        if section is None:
            section = {}
        if not isinstance(section, dict):
            raise SpecError(
                file,
                f"{where}{backend}",
                f"must be a mapping of backend settings (got {type(section).__name__})",
            )
        raw[SETTINGS] = section
    return raw


def backend_of(raw: object) -> str:
    """The backend a spec in its YAML shape names: its ``backend`` key, else the default
    (:data:`gppo.cell.DEFAULT_BACKEND`). Reads only that key; :func:`spec_from_yaml` validates."""
    backend = raw.get("backend", DEFAULT_BACKEND) if isinstance(raw, dict) else DEFAULT_BACKEND
    return str(backend)


def spec_from_yaml(raw: object, file: str = "<spec>") -> GridSpec:
    """Validate a spec in its YAML shape (already parsed: a mapping) into a :class:`GridSpec`."""
    from pydantic import ValidationError

    if not isinstance(raw, dict):
        raise SpecError(file, "", f"the spec must be a YAML mapping (got {type(raw).__name__})")
    for key in raw:
        if not isinstance(key, str):
            raise SpecError(file, "", f"keys must be strings (got {key!r})")
    backend = raw.get("backend", DEFAULT_BACKEND)  # not backend_of: a non-string is an error
    raw = _section_from_yaml(raw, backend, file, "")
    overrides = raw.get("overrides")
    if isinstance(overrides, dict):
        raw["overrides"] = {
            key: _section_from_yaml(value, backend, file, f"overrides.{key}.")
            if isinstance(value, dict)
            else value
            for key, value in overrides.items()
        }
    try:
        return GridSpec.model_validate(raw)
    except ValidationError as exc:
        keys = {SETTINGS: backend} if isinstance(backend, str) else None
        raise from_validation_error(file, exc, model=GridSpec, keys=keys) from None


def spec_to_yaml(spec: GridSpec, *, defaults: bool = False) -> dict[str, Any]:
    """``spec`` in its YAML shape, ready for ``yaml.safe_dump``: what was set (by the file, or by
    whoever built the spec), or with ``defaults`` every field; the backend's section right after
    ``backend``. :func:`spec_from_yaml` reads it back into an equal spec."""
    data = spec.model_dump(mode="json", exclude_unset=not defaults)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == SETTINGS:
            continue
        out[key] = value
        if key == "backend" and SETTINGS in data:
            out[spec.backend] = data[SETTINGS]
    if SETTINGS in data and spec.backend not in out:  # the default backend, not written
        out[spec.backend] = data[SETTINGS]
    for name, override in (out.get("overrides") or {}).items():
        if SETTINGS in override:
            section = override.pop(SETTINGS)
            out["overrides"][name] = {spec.backend: section, **override}
    return out


#: the loader's name for :func:`spec_from_yaml`
parse_spec = spec_from_yaml


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> GridSpec:
    """Load and validate the spec file at ``path`` (no other I/O), edited by ``overrides``
    (``KEY=VALUE`` tokens, :mod:`gppo.grid.overrides`) as its file would be."""
    return _load(path, overrides)[0]


def read_yaml(path: str | Path) -> Any:
    """The spec file at ``path`` parsed (a mapping, unchecked); unreadable, not YAML or empty:
    one :class:`SpecError` line naming the file."""
    import yaml

    file = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise SpecError(file, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            file, "", f"cannot read the file ({exc.__class__.__name__}: {exc})"
        ) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(file, "", f"invalid YAML at {where}: {problem}") from None
    if raw is None:  # nothing but blank lines or comments
        raise SpecError(
            file, "", "the file is empty" + ("" if not text.strip() else " (comments only)")
        )
    return raw


def _load(path: str | Path, overrides: Sequence[str]) -> tuple[GridSpec, list[SpecOverride]]:
    """The spec at ``path`` with ``overrides`` applied, and the overrides (raises
    :class:`SpecError`; an error an override causes names that override)."""
    from gppo.grid.overrides import apply_texts, attributed

    file = str(path)
    raw = read_yaml(path)
    applied: list[SpecOverride] = []
    if overrides:
        if not isinstance(raw, dict):
            return spec_from_yaml(raw, file), applied  # the loader's own error
        raw, applied = apply_texts(raw, overrides)
    with attributed(applied):
        return spec_from_yaml(raw, file), applied


@dataclass(frozen=True)
class Plan:
    """Everything ``launch``/``status``/``plan`` need from a spec file (pure, no side effects)."""

    source: str
    spec: GridSpec
    sweep_id: str
    cells: tuple[Cell, ...]
    #: the command line's ``KEY=VALUE`` overrides applied to the file, as typed
    overrides: tuple[str, ...] = ()

    def cell(self, cell_id: str) -> Cell:
        for c in self.cells:
            if c.id == cell_id:
                return c
        known = ", ".join(c.id for c in self.cells[:8]) + (", ..." if len(self.cells) > 8 else "")
        raise SpecError(self.source, "", f"no cell {cell_id!r} in this sweep; cells: {known}")


def load_plan(path: str | Path, overrides: Sequence[str] = ()) -> Plan:
    """Load, validate and expand the spec at ``path``, edited by ``overrides`` (``KEY=VALUE``
    tokens; the plan is the edited file's) (raises :class:`SpecError`)."""
    from gppo.grid.overrides import attributed, texts_of

    source = str(path)
    spec, applied = _load(path, overrides)
    with attributed(applied):
        cells = tuple(expand(spec, source))
    return Plan(
        source=source,
        spec=spec,
        sweep_id=sweep_id(spec),
        cells=cells,
        overrides=texts_of(applied),
    )


def spec_resolved(spec: GridSpec) -> dict[str, Any]:
    """``spec`` in its YAML shape with every default filled in, the backend's section with its
    resolved settings (``plan --resolved``; loading it gives the same plan)."""
    from gppo.backends.base import get_backend

    settings = get_backend(spec.backend).validate_settings(spec.settings)
    resolved = spec.model_copy(update={SETTINGS: settings.model_dump(mode="json")})
    return spec_to_yaml(resolved, defaults=True)


def region_preview(cell: Cell, mus: tuple[float, ...] = PREVIEW_MUS) -> list[list[float]] | None:
    """Per μ the clip interval ``[r_lo, r_hi]`` of a gppo cell (after ``ratio_bounds``)."""
    if (
        cell.method != "gppo"
        or cell.divergence is None
        or cell.estimator is None
        or cell.delta is None
    ):
        return None
    from gppo.objectives.regions import clip_interval

    bounds = cell.loss_params.get("ratio_bounds")
    lo, hi = clip_interval(cell.divergence, cell.estimator, cell.delta, mus, bounds)
    return [[float(a), float(b)] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]


def plan_rows(plan: Plan, *, regions: bool = True) -> list[dict[str, Any]]:
    """One JSON-safe dict per cell: coordinates, δ, region preview, seed, its run key and the
    lead whose run serves it (``same_runs``, :mod:`gppo.grid.sharing`), the job's argv and
    its environment (the backend's variables plus the two the launcher sets: the tracking URI and
    the run id, which exists only once the launch creates the cell's run)."""
    from gppo import metrics as M
    from gppo.backends.base import get_backend
    from gppo.store.uri import resolve_tracking_uri, without_password

    backend = get_backend(plan.spec.backend)
    launcher_env = {
        # as the dispatcher gives it: no password (the job's node supplies it)
        M.ENV_TRACKING_URI: without_password(resolve_tracking_uri(plan.spec.tracking.uri)),
        M.ENV_RUN_ID: "<run id, at launch>",
    }
    from gppo.grid.sharing import lead_of, run_key

    leads = lead_of(plan.cells)  # cells that are the same function as an earlier one
    rows = []
    for cell in plan.cells:
        job = backend.job(cell)
        rows.append(
            {
                "cell": cell.id,
                "method": cell.method,
                "divergence": cell.divergence,
                "estimator": cell.estimator,
                "delta": cell.delta,
                "seed": cell.seed,
                "axes": dict(cell.axes),  # the axes that move the cell -> its value there
                "region": region_preview(cell) if regions else None,
                "mus": list(PREVIEW_MUS),
                "config_hash": cell.config_hash,
                "run_key": run_key(cell),
                "same_runs": leads.get(cell.id),  # the lead whose run serves it, or None
                "entrypoint": list(job.argv),
                "env": {**dict(job.env), **launcher_env},
                "command": job.entrypoint,
            }
        )
    return rows


def fmt_interval(lo: float, hi: float) -> str:
    def f(x: float) -> str:
        return "inf" if math.isinf(x) else f"{x:.3g}"

    return f"[{f(lo)}, {f(hi)}]"
