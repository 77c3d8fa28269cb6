"""A cell's checkpoint directory is resumed only by its own run: a later sweep of the same cell
(same id and settings, so the same directory) starts afresh instead of reporting the earlier
sweep's model as its own (:mod:`gppo.backends.checkpoints`, used by the verl and TRL
entrypoints); TRL resumes its newest complete checkpoint, never one cut off mid-save."""

from __future__ import annotations

from pathlib import Path

from gppo.backends.checkpoints import OWNER_FILE, checkpoint_owner, claim_checkpoints


def _saved(directory: Path, *names: str) -> None:
    for name in names:
        (directory / name).mkdir(parents=True)
        (directory / name / "weights").write_text("w")


def test_an_attempt_of_the_same_run_keeps_its_checkpoints(tmp_path):
    d = tmp_path / "tv-mc-s0-abc"
    assert claim_checkpoints(d, "run-1") is None  # a new directory: nothing to say
    _saved(d, "checkpoint-4")
    assert claim_checkpoints(d, "run-1") is None
    assert (d / "checkpoint-4" / "weights").is_file() and checkpoint_owner(d) == "run-1"


def test_another_runs_checkpoints_are_removed_with_one_line(tmp_path):
    d = tmp_path / "tv-mc-s0-abc"
    claim_checkpoints(d, "run-1")
    _saved(d, "checkpoint-4", "final")
    note = claim_checkpoints(d, "run-2")
    assert note is not None and "\n" not in note and "run run-1" in note and str(d) in note
    assert sorted(p.name for p in d.iterdir()) == [OWNER_FILE] and checkpoint_owner(d) == "run-2"


def test_checkpoints_of_no_recorded_run_are_removed(tmp_path):
    d = tmp_path / "cell"
    _saved(d, "global_step_3")  # left by a version that recorded no owner
    note = claim_checkpoints(d, "run-1")
    assert note is not None and "no recorded run" in note
    assert not (d / "global_step_3").exists() and checkpoint_owner(d) == "run-1"


def test_a_cell_run_outside_a_sweep_never_resumes(tmp_path):
    d = tmp_path / "cell"
    claim_checkpoints(d, "run-1")
    _saved(d, "checkpoint-2")
    assert claim_checkpoints(d, None) is not None
    assert list(d.iterdir()) == [] and checkpoint_owner(d) is None


def test_trl_resumes_its_newest_complete_checkpoint(tmp_path):
    from gppo.backends.trl.__main__ import CHECKPOINT_COMPLETE, last_complete_checkpoint

    assert last_complete_checkpoint(tmp_path / "none") is None
    _saved(tmp_path, "checkpoint-8", "checkpoint-16", "checkpoint-24", "checkpoint-x")
    for name in ("checkpoint-8", "checkpoint-16"):
        (tmp_path / name / CHECKPOINT_COMPLETE).write_text("{}")
    # checkpoint-24 was cut off before transformers wrote its trainer state
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-16")
    assert not (tmp_path / "checkpoint-24").exists()
    assert (tmp_path / "checkpoint-8").is_dir() and (tmp_path / "checkpoint-x").is_dir()
