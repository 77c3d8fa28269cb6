"""``gppo-sweep check --train-step``: one real training step of each verl cell through verl's
``main_ppo`` on this machine's CPU (the verl CPU environment and :data:`gppo.backends.verl.cpu.CPU_MODE`).

The cell's own job (:meth:`VerlBackend.job`: its loss, overrides and entrypoint) with only the
hardware and the scale changed: verl's CPU mode, one fake GPU, the tiny random Qwen2 of the smoke
assets in place of the base model, 2 prompts x 2 samples of 16 tokens, one step, validation at
steps 0 and 1. The cell's own train and validation files are read when they are on this machine
(else the smoke data, and the line says so). The step covers data loading, the reward, vLLM
rollouts, the weight sync, the loss inside verl's worker, the metric mapping and MLflow logging
into a throw-away SQLite store; it says nothing about GPU memory or speed.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
import time
from pathlib import Path

from gppo import metrics as m
from gppo.backends.checkresult import CellCheck, one_line
from gppo.cell import Cell
from gppo.store.tracking import store_client

#: The scale of the step (every other setting is the cell's own).
STEP_SETTINGS = {
    "cpu": True,
    "nnodes": 1,
    "gpus_per_node": 1,
    "rollout_tp": 1,
    "rollout_gpu_memory_utilization": 0.1,
    "sequence_parallel": 1,
    "max_token_len_per_gpu": None,
    "prompts_per_step": 2,
    "group_size": 2,
    "mini_batch_prompts": 2,
    "max_response_length": 16,
    "total_steps": 1,
    "eval_every": 1,
    "save_every": 1,
    "mirror_every_s": 5.0,
    "python": None,
}


def step_cell(cell: Cell, work: Path) -> tuple[Cell, str]:
    """The cell at train-step scale, and a note on the data it reads."""
    from gppo.backends.verl.settings import VerlSettings
    from gppo.backends.verl.smoke import SMOKE_SOURCE, build_smoke_assets

    assets = build_smoke_assets()
    raw = {**cell.settings, **STEP_SETTINGS, "smoke_assets": False, "testbed": False}
    raw.update(model_path=str(assets.model_dir), checkpoint_dir=str(work / "checkpoints"))
    original = VerlSettings.model_validate(cell.settings)
    train = original.train_for(cell.seed)
    files = [train, *original.benchmark_files.values()]
    missing = [f for f in files if not Path(f).is_file()]
    raw.update(train_file=train, val_files=original.benchmark_files)
    benchmarks = cell.benchmarks
    if missing:
        raw.update(
            train_file=str(assets.train_file), val_files={SMOKE_SOURCE: str(assets.val_file)}
        )
        benchmarks, note = (SMOKE_SOURCE,), f"smoke data ({missing[0]} is not on this machine)"
    else:
        note = "the cell's data"
    return dataclasses.replace(cell, settings=raw, benchmarks=benchmarks), note


def train_step(cell: Cell, *, timeout_s: float = 1200.0) -> CellCheck:
    """One CPU training step of ``cell`` (never raises for the cell's own failure)."""
    from gppo.backends.base import get_backend
    from gppo.backends.verl.cpu import CPU_MODE
    from gppo.backends.verl.settings import VerlSettings

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gppo-train-step-") as tmp:
        work = Path(tmp)
        try:
            small, note = step_cell(cell, work)
            job = get_backend("verl").job(small)
            # verl starts its own Ray here (no cluster): the CPU mode's resources, fake GPU too
            ray_init = CPU_MODE.ray_init_overrides(VerlSettings.model_validate(small.settings))
        except Exception as exc:
            return CellCheck(cell.id, False, "config", one_line(f"{type(exc).__name__}: {exc}"))
        uri = f"sqlite:///{work}/mlflow.db"
        client = store_client(uri)
        run_id = client.create_run(client.create_experiment("train-step")).info.run_id
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(job.env, **{m.ENV_TRACKING_URI: uri, m.ENV_RUN_ID: run_id})
        log = work / "step.log"
        try:
            with log.open("wb") as out:
                rc = subprocess.run(
                    [*job.argv, *ray_init], cwd=work, env=env, stdout=out,
                    stderr=subprocess.STDOUT, timeout=timeout_s,
                ).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            return CellCheck(cell.id, False, "train-step", f"no result within {timeout_s:g} s")
        seconds = time.monotonic() - start
        if rc != 0:
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            error = next(
                (ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else ""
            )
            return CellCheck(cell.id, False, "train-step", one_line(f"exit {rc}: {error}"))
        metrics = client.get_run(run_id).data.metrics
        wanted = [
            m.TRAIN_SCORE,
            m.POLICY_LOSS,
            "actor/grad_norm",
            m.eval_domain_metric(cell.eval_k),
        ]
        absent = [k for k in wanted if k not in metrics]
        if absent:
            return CellCheck(cell.id, False, "train-step", f"not logged: {', '.join(absent)}")
    return CellCheck(
        cell.id,
        True,
        "",
        f"one verl training step on CPU ({note}): rollout, reward, weight sync, loss, "
        f"MLflow ok; grad_norm {metrics['actor/grad_norm']:.3g}, {seconds:.0f} s",
    )
