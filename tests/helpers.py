"""Test helpers shared across the suite (``tests/`` is on pytest's ``pythonpath``)."""

from __future__ import annotations

from typing import Any

from gppo.cell import Cell, cell_id


def make_cell(
    divergence: str | None = "kl",
    estimator: str | None = "atomic",
    *,
    method: str = "gppo",
    seed: int = 0,
    delta: float | None = None,
    **fields: Any,
) -> Cell:
    """A :class:`Cell` as ``grid.expand`` names it (``kl-atomic-s0``, ``gspo-s1``), with a grid
    cell's divergence, estimator and δ in its ``loss_params``; ``fields`` set the rest
    (``settings``, ``backend``, ``resources``, extra ``loss_params`` ...)."""
    grid = method == "gppo"
    cid = cell_id(str(divergence), estimator, seed) if grid else cell_id(method, seed=seed)
    params = {"divergence": divergence, "estimator": estimator} if grid else {}
    if grid and delta is not None:
        params["delta"] = delta
    params.update(fields.pop("loss_params", {}))
    return Cell(
        id=fields.pop("id", cid),
        method=method,
        seed=seed,
        loss_params=params,
        **fields,
    )
