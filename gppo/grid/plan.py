"""A loaded, expanded spec (:class:`Plan`) and the rows ``gppo-sweep plan`` shows."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gppo.cell import Cell
from gppo.grid.errors import SpecError
from gppo.grid.expand import expand, sweep_id
from gppo.grid.load import load_spec
from gppo.grid.schema import GridSpec

#: behaviour probabilities at which ``plan`` previews each cell's proximal region
PREVIEW_MUS = (0.01, 0.1, 0.5, 0.9)


@dataclass(frozen=True)
class Plan:
    """Everything ``launch``/``status``/``plan`` need from a spec file (pure, no side effects)."""

    source: str
    spec: GridSpec
    sweep_id: str
    cells: tuple[Cell, ...]

    def cell(self, cell_id: str) -> Cell:
        for c in self.cells:
            if c.id == cell_id:
                return c
        known = ", ".join(c.id for c in self.cells[:8]) + (", ..." if len(self.cells) > 8 else "")
        raise SpecError(self.source, "", f"no cell {cell_id!r} in this sweep; cells: {known}")


def load_plan(path: str | Path) -> Plan:
    """Load, validate and expand the spec at ``path`` (raises :class:`SpecError`)."""
    source = str(path)
    spec = load_spec(path)
    cells = tuple(expand(spec, source))
    return Plan(source=source, spec=spec, sweep_id=sweep_id(spec), cells=cells)


def region_preview(cell: Cell, mus: tuple[float, ...] = PREVIEW_MUS) -> list[list[float]] | None:
    """Per μ the clip interval ``[r_lo, r_hi]`` of a gppo cell (after ``ratio_bounds``)."""
    if cell.method != "gppo" or cell.divergence is None or cell.delta is None:
        return None
    import torch

    from gppo.objectives import proximal_region

    mu = torch.tensor(mus, dtype=torch.float64)
    lo, hi = proximal_region(cell.divergence, cell.estimator, cell.delta, mu)
    bounds = cell.loss_params.get("ratio_bounds")
    if bounds:
        lo, hi = lo.clamp(min=bounds[0]), hi.clamp(max=bounds[1])
    return [[float(a), float(b)] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]


def plan_rows(plan: Plan, *, regions: bool = True) -> list[dict[str, Any]]:
    """One JSON-safe dict per cell: coordinates, δ, region preview, seed, the job's argv and
    its environment (the backend's variables plus the two the launcher sets: the tracking URI and
    the run id, which exists only once the launch creates the cell's run)."""
    from gppo import metrics as M
    from gppo.backends.base import get_backend
    from gppo.store.uri import resolve_tracking_uri

    backend = get_backend(plan.spec.backend)
    launcher_env = {
        M.ENV_TRACKING_URI: resolve_tracking_uri(plan.spec.tracking.uri),
        M.ENV_RUN_ID: "<run id, at launch>",
    }
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
                "region": region_preview(cell) if regions else None,
                "mus": list(PREVIEW_MUS),
                "config_hash": cell.config_hash,
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
