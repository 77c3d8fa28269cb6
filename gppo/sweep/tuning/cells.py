"""A trial's configuration → a :class:`Cell`, through the grid loader and expansion.

Everything a grid cell gets (backend settings validation, δ calibration from r_min, overrides,
benchmarks, resources) a trial gets the same way: its :class:`GridSpec` (:func:`space.trial_spec`,
built directly, no YAML round trip) is expanded by :func:`gppo.grid.expand` into one cell.
:func:`check_spec` does this up front for every corner of the space, so a malformed base or a
space the backend refuses is reported before anything is started.
"""

from __future__ import annotations

from gppo.grid import Cell, GridSpec, SpecError, expand
from gppo.grid.axes import spec_path
from gppo.grid.load import backend_of
from gppo.sweep.tuning.space import TrialConfig, corner_configs, trial_spec
from gppo.sweep.tuning.spec import TuneSpec, TuneSpecError


def trial_cell(spec: TuneSpec, cfg: TrialConfig, number: int) -> tuple[Cell, GridSpec]:
    """The single cell of trial ``number`` and its grid spec (raises :class:`SpecError`)."""
    grid = trial_spec(spec, cfg, number)
    cells = expand(grid, spec.file)
    if len(cells) != 1:  # the trial grid has one divergence, one estimator and one seed
        raise SpecError(spec.file, "", f"a trial expanded to {len(cells)} cells, expected 1")
    return cells[0], grid


def check_spec(spec: TuneSpec) -> GridSpec:
    """Validate the base grid settings and every corner of the space; return one trial's grid."""
    grid = None
    for cfg in corner_configs(spec.tune.space):
        try:
            _, grid = trial_cell(spec, cfg, 0)
        except SpecError as err:
            raise _space_error(spec, cfg, err) from None
    assert grid is not None
    return grid


def _space_error(spec: TuneSpec, cfg: TrialConfig, err: SpecError) -> TuneSpecError:
    """Name the part of the tuning spec a grid error came from (the space, or the base)."""
    backend = backend_of(spec.base)
    searched = {cfg.lr_key: "tune.space.lr"} if cfg.lr_key else {}
    searched.update({k: f"tune.space.settings.{k}" for k in cfg.settings})
    if err.path.startswith("tune.space"):  # the path parser's own error
        return TuneSpecError(err.file, err.path, err.message)
    for key, where in searched.items():
        path = spec_path(key, backend)
        if err.path == path or err.path.startswith(f"{path}."):
            return TuneSpecError(err.file, where, f"{err.message} (at {cfg.label})")
    if not err.path or err.path.startswith(("grid", "reference", "calibration")):
        return TuneSpecError(err.file, "tune.space", f"{err.message} (at {cfg.label})")
    return TuneSpecError(err.file, err.path, err.message)
