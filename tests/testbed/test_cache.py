"""One rule for where gppo keeps what it builds: ``$GPPO_CACHE_DIR``, else ``~/.cache/gppo-sweep``,
and every user (self-built bases, the testbed's assets, verl's smoke assets, checkpoints) below it."""

from __future__ import annotations

from pathlib import Path

from gppo.backends.checkpoints import cell_checkpoint_dir, checkpoint_root
from gppo.backends.verl.smoke import assets_root as smoke_root
from gppo.cell import Cell
from gppo.testbed import hf_assets
from gppo.testbed.cache import cache_root
from gppo.testbed.settings import BaseModelSettings
from gppo.testbed.warmstart import cache_dir


def test_the_variable_moves_every_user_of_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path
    users = [
        cache_dir(BaseModelSettings()),
        hf_assets.TestbedAssets.for_domain("math").root,
        smoke_root(),
        checkpoint_root("trl"),
        checkpoint_root("verl"),
    ]
    assert all(p.is_relative_to(tmp_path) for p in users), users
    assert len({p.relative_to(tmp_path).parts[0] for p in users}) == 4  # bases, assets, ...


def test_without_the_variable_the_home_cache(monkeypatch):
    monkeypatch.delenv("GPPO_CACHE_DIR", raising=False)
    assert cache_root() == Path.home() / ".cache" / "gppo-sweep"
    monkeypatch.setenv("GPPO_CACHE_DIR", "")
    assert cache_root() == Path.home() / ".cache" / "gppo-sweep"


def test_a_cells_checkpoint_directory_is_named_once(tmp_path):
    cell = Cell(id="tv-mc-s0", method="gppo", seed=0, backend="trl")
    assert cell_checkpoint_dir(cell, "trl", str(tmp_path)) == (
        tmp_path / f"{cell.id}-{cell.config_hash}"
    )
    assert cell_checkpoint_dir(cell, "verl").parent == checkpoint_root("verl")
