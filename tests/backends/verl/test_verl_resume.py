"""gppo.backends.verl.resume (a checkpoint saved but never logged is not resumed from) and the
CPU preset refused where vLLM is missing."""

from __future__ import annotations

from gppo.backends.verl.resume import TRACKER, align_checkpoints, saved_steps


def _ckpts(root, steps, tracker):
    for step in steps:
        (root / f"global_step_{step}").mkdir(parents=True)
    (root / TRACKER).write_text(str(tracker))
    return root


def test_a_saved_but_unlogged_step_is_trained_again(tmp_path):
    root = _ckpts(tmp_path, [2, 3], 3)
    note = align_checkpoints(root, logged_step=2)
    assert (root / TRACKER).read_text() == "2" and saved_steps(root) == [2]
    assert note == (
        "checkpoint of step 3 was saved but never logged (the attempt died in between): "
        "resuming from step 2, so the run logs steps 3..3 once"
    )


def test_nothing_changes_when_the_run_has_the_checkpointed_step(tmp_path):
    root = _ckpts(tmp_path, [2, 3], 3)
    assert align_checkpoints(root, logged_step=3) is None
    assert (root / TRACKER).read_text() == "3" and saved_steps(root) == [2, 3]
    assert align_checkpoints(tmp_path / "none-yet", logged_step=0) is None


def test_without_an_older_checkpoint_the_gap_is_said(tmp_path):
    root = _ckpts(tmp_path, [3], 3)
    note = align_checkpoints(root, logged_step=1)
    assert (root / TRACKER).read_text() == "3" and saved_steps(root) == [3]
    assert "no older checkpoint is kept" in note and "lack step(s) 2..3" in note


def test_a_cpu_spec_launched_without_vllm_is_refused_in_one_line():
    """The main environment has no vLLM: the CPU preset is refused before anything is built or
    submitted, naming the command that sets the CPU environment up."""
    import importlib.util

    import pytest

    from gppo.backends.base import get_backend
    from gppo.backends.verl.cpu import CPUEnvironmentMissing
    from gppo.backends.verl.settings import VerlSettings

    assert importlib.util.find_spec("vllm") is None  # the locked main environment
    settings = VerlSettings(cpu=True, smoke_assets=True)
    with pytest.raises(CPUEnvironmentMissing, match=r"scripts/verl-cpu-env\.sh") as err:
        get_backend("verl").prepare(settings)
    assert "\n" not in str(err.value)
