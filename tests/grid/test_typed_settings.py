"""Typed settings end to end: the grid expansion keeps each cell's validated settings model, the
backend reads that model (no second validation), and a cell read back from JSON (inside its
job) validates to the same settings."""

from __future__ import annotations

import pytest

from gppo.backends.base import get_backend
from gppo.backends.local.settings import LocalSettings
from gppo.cell import Cell
from gppo.grid import expand, parse_spec

SPEC = {
    "name": "typed",
    "backend": "local",
    "local": {"steps": 3},
    "grid": {"divergences": ["tv", "kl"], "estimators": ["mc"]},
    "overrides": {"kl-mc": {"local": {"lr": 5.0e-5}}},
}


@pytest.fixture
def cells() -> list[Cell]:
    return expand(parse_spec(SPEC, "g.yaml"))


def test_each_cell_carries_its_validated_settings(cells):
    by_id = {c.id: c for c in cells}
    tv, kl = by_id["tv-mc-s0"].settings_model, by_id["kl-mc-s0"].settings_model
    assert isinstance(tv, LocalSettings) and isinstance(kl, LocalSettings)
    assert tv.steps == kl.steps == 3 and kl.lr == 5.0e-5 and tv.lr != 5.0e-5  # the override's
    for cell in cells:  # the model and the recorded plain settings say the same
        assert cell.settings_model.model_dump(mode="json") == cell.settings


def test_the_backend_reads_the_kept_model_without_validating_again(cells, monkeypatch):
    backend = get_backend("local")

    def refuse(raw):
        raise AssertionError("settings validated a second time")

    monkeypatch.setattr(backend, "validate_settings", refuse)
    for cell in cells:
        assert backend.settings_of(cell) is cell.settings_model


def test_a_cell_from_json_validates_to_the_same_settings(cells):
    for cell in cells:
        back = Cell.from_json(cell.to_json())
        assert back.settings_model is None  # the model is not part of what a job receives
        assert back == cell and back.config_hash == cell.config_hash
        assert get_backend("local").settings_of(back) == cell.settings_model


def test_a_copy_with_other_settings_is_validated_afresh(cells):
    """``dataclasses.replace`` may change ``settings``: the copy keeps no stale model."""
    from dataclasses import replace

    cell = cells[0]
    copy = replace(cell, settings={**cell.settings, "steps": 7})
    assert copy.settings_model is None
    assert get_backend("local").settings_of(copy).steps == 7
