"""A resumed verl cell logs every training step once.

verl saves step k's checkpoint, then syncs the weights to the rollout engine, and only then logs
step k's metrics (``verl/trainer/ppo/ray_trainer.py:1712-1716``, ``:1802``). An attempt that
dies in between (a dead or hung vLLM engine blocks the weight sync; a killed node) leaves a
checkpoint of a step its MLflow run never got, and verl's ``resume_mode: auto`` would go on from
it: the run would miss that step for good. Before verl starts, :func:`align_checkpoints` moves
verl's tracker back to the newest kept checkpoint whose step the run has, so those steps are
trained and logged again (``verl.max_checkpoints_to_keep`` >= 2 keeps one to go back to).
"""

from __future__ import annotations

import shutil
from pathlib import Path

#: verl's checkpoint tracker file and step folders (verl/utils/checkpoint/checkpoint_manager.py:222-259)
TRACKER = "latest_checkpointed_iteration.txt"
STEP_DIR = "global_step_"


def saved_steps(ckpt_dir: Path) -> list[int]:
    """The steps with a checkpoint folder in ``ckpt_dir``, ascending."""
    steps = []
    for path in ckpt_dir.glob(f"{STEP_DIR}*"):
        suffix = path.name.removeprefix(STEP_DIR)
        if path.is_dir() and suffix.isdigit():
            steps.append(int(suffix))
    return sorted(steps)


def align_checkpoints(ckpt_dir: str | Path, logged_step: int) -> str | None:
    """Point verl's tracker at the newest checkpoint at or below ``logged_step`` (the run's latest
    logged training step) when a newer one was saved but never logged; returns what was done as
    one line (None when nothing needed doing)."""
    ckpt_dir = Path(ckpt_dir)
    tracker = ckpt_dir / TRACKER
    try:
        saved = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None
    if saved <= logged_step:
        return None
    older = [step for step in saved_steps(ckpt_dir) if step <= logged_step]
    if not older:
        return (
            f"checkpoint of step {saved} was saved but the run has steps only up to "
            f"{logged_step}, and no older checkpoint is kept (verl.max_checkpoints_to_keep: 1): "
            f"resuming from step {saved}; the run will lack step(s) {logged_step + 1}..{saved}"
        )
    target = older[-1]
    tracker.write_text(str(target))
    for step in saved_steps(ckpt_dir):
        if step > target:
            shutil.rmtree(ckpt_dir / f"{STEP_DIR}{step}", ignore_errors=True)
    return (
        f"checkpoint of step {saved} was saved but never logged (the attempt died in between): "
        f"resuming from step {target}, so the run logs steps {target + 1}..{saved} once"
    )


def final_hf_dir(checkpoint_dir: str | Path, step: int) -> Path:
    """verl's Hugging Face export of the actor at ``step`` (``save_contents`` with ``hf_model``)."""
    path = Path(checkpoint_dir) / f"{STEP_DIR}{step}" / "actor" / "huggingface"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no Hugging Face checkpoint of step {step} at {path} (verl saves it at the last step "
            "when checkpoint.save_contents has hf_model)"
        )
    return path
