"""Shared fixtures: the cells of the shipped paper configs, expanded by gppo.grid."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data"
PAPER_CONFIGS = ("paper-math", "paper-code")


def paper_cells(name: str):
    from gppo.grid.expand import expand
    from gppo.grid.load import load_spec

    path = REPO / "configs" / f"{name}.yaml"
    return expand(load_spec(path), str(path))


@pytest.fixture(scope="session")
def all_paper_cells():
    return {name: paper_cells(name) for name in PAPER_CONFIGS}


@pytest.fixture(scope="session")
def composed(all_paper_cells):
    """``{(config, cell id): (cell, overrides dict, composed cfg, built dataclasses)}``: every cell
    composed with verl's Hydra config and validated once per session."""
    from gppo.backends.verl.overrides import build_overrides, cell_overrides
    from gppo.backends.verl.settings import VerlSettings
    from gppo.backends.verl.validate import compose_and_validate

    out = {}
    for config, cells in all_paper_cells.items():
        for cell in cells:
            settings = VerlSettings.model_validate(cell.settings)
            cfg, built = compose_and_validate(tuple(cell_overrides(cell, settings)))
            out[config, cell.id] = (cell, build_overrides(cell, settings), cfg, built)
    return out
