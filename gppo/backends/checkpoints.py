"""Whose checkpoints a cell's checkpoint directory holds: only its own run resumes them.

A cell's checkpoint directory is named by the cell's id and settings hash
(:func:`cell_checkpoint_dir`, for every backend that checkpoints), so it is the same for every
attempt of the cell, which is what lets a retried attempt resume. Its root is the section's
``checkpoint_dir``, or by default ``checkpoints/<backend>`` under the cache root
(:func:`gppo.testbed.cache.cache_root`) of the machine that resolves it. It is also the same for a later sweep of the same spec (a new tracking
store, a relaunch after the runs were deleted, a changed loss implementation): such a run would
find the earlier sweep's last checkpoint, "resume" at its final step, log no training and report
the earlier model's scores as its own. So before training, the entrypoint claims the directory
for its MLflow run (:func:`claim_checkpoints`): checkpoints another run (or no run) left are
removed and training starts at step 0; an attempt of the same run keeps them and resumes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from gppo.testbed.cache import cache_root

if TYPE_CHECKING:
    from gppo.cell import Cell

#: the file in a checkpoint directory that names the MLflow run its checkpoints belong to
OWNER_FILE = "gppo-run-id"


def checkpoint_root(backend: str, checkpoint_dir: str | None = None) -> Path:
    """Where ``backend``'s cells keep their checkpoint directories: ``checkpoint_dir`` (``~``
    expanded) when a section sets it, else ``<cache root>/checkpoints/<backend>``."""
    if checkpoint_dir:
        return Path(checkpoint_dir).expanduser()
    return cache_root() / "checkpoints" / backend


def cell_checkpoint_dir(cell: Cell, backend: str, checkpoint_dir: str | None = None) -> Path:
    """The cell's own checkpoint directory, ``<root>/<cell id>-<config hash>``: stable across its
    attempts, new when its settings change (:func:`checkpoint_root` for the root)."""
    return checkpoint_root(backend, checkpoint_dir) / f"{cell.id}-{cell.config_hash}"


def checkpoint_owner(directory: str | Path) -> str | None:
    """The run id recorded in ``directory`` (``None``: none recorded, or no directory)."""
    try:
        return (Path(directory) / OWNER_FILE).read_text().strip() or None
    except OSError:
        return None


def claim_checkpoints(directory: str | Path, run_id: str | None) -> str | None:
    """Make ``directory`` hold only checkpoints of ``run_id`` (``None``: a cell run outside a
    sweep, which never resumes). Returns one line saying what was removed, or ``None``."""
    directory = Path(directory)
    owner = checkpoint_owner(directory)
    note = None
    if run_id is None or owner != run_id:
        left = (
            [p for p in directory.iterdir() if p.name != OWNER_FILE] if directory.is_dir() else []
        )
        if left:
            whose = f"run {owner}" if owner else "no recorded run"
            shutil.rmtree(directory)
            note = (
                f"{directory} held checkpoints of {whose}, not of this run: removed, "
                "training starts at step 0"
            )
    directory.mkdir(parents=True, exist_ok=True)
    if run_id is not None:
        (directory / OWNER_FILE).write_text(run_id)
    return note
