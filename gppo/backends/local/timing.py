"""The testbed's pre-flight timing: one cell's training steps, evaluation and probe timed on this
machine (:meth:`gppo.backends.local.backend.LocalBackend.step_timing`), for ``plan``'s cost
forecast when the store has no comparable runs (:mod:`gppo.sweep.planning.forecast`).

A run of ``steps`` steps is forecast as ``startup_s + steps x step_s``: ``startup_s`` is the base
model's load, one evaluation per evaluation point of the run (the final one, every
``eval_every``, the selection split's) and one answer probe per probed step
(:func:`gppo.metrics.probe_step`), plus the first step's extra over the others; ``step_s`` is the
mean of the next :data:`TIMED_STEPS` steps. It is timed in a process of its own with the cell's
environment (its CPU kernels and threads, :func:`measure_in_cell_process`): ``plan``'s process
computes with the machine's natural kernels, up to 1.8x faster than a pinned cell, and a job's
start (Python, torch, the package) is part of its cost. Takes a few seconds; the result is kept
per settings and CPU kind in the cache root (``step-timing/``), so ``plan`` measures once per
machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gppo import metrics as M
from gppo.backends.base import thread_env
from gppo.backends.checkresult import StepTiming
from gppo.cell import Cell
from gppo.store.cost import cost_key, cost_settings
from gppo.testbed import cpu_kernels
from gppo.testbed.cache import cache_root

#: steps timed after the first (whose extra counts as start-up)
TIMED_STEPS = 2


def cache_path(cell: Cell) -> Path:
    """Where the cell's timing is kept: one file per cost key (every setting that changes a
    run's time: :func:`gppo.store.cost.cost_key`), under the cache root's ``step-timing/``."""
    from gppo.backends.local.settings import LocalSettings

    key = cost_key(cell, cell.resources, cost_settings(LocalSettings, cell.settings))
    return cache_root() / "step-timing" / f"{key}.json"


def step_timing(cell: Cell, *, cached: bool = True) -> StepTiming:
    """The cell's :class:`StepTiming`: read from :func:`cache_path` when ``cached`` and the file
    holds this CPU kind's timing, else measured in a process of its own
    (:func:`measure_in_cell_process`) and written there."""
    path = cache_path(cell)
    cpu = cpu_kernels.cpu_model()
    if cached and path.exists():
        data = json.loads(path.read_text())
        if data.get("cpu") == cpu:
            return StepTiming(data["startup_s"], data["step_s"], data["steps"])
    timing = measure_in_cell_process(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"cpu": cpu, **timing.__dict__}
    path.write_text(json.dumps(data))
    return timing


def measure_in_cell_process(cell: Cell) -> StepTiming:
    """:func:`measure` in a fresh process with the environment the cell's job has (its CPU
    kernels, its threads); the process's start until :func:`measure` begins counts as start-up."""
    from gppo.backends.local.settings import LocalSettings

    s = LocalSettings.model_validate(cell.settings)
    env = {**os.environ, **thread_env(s.num_threads)}
    cpu_kernels.apply(s.cpu_kernels, env)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "gppo.backends.local.timing", cell.to_json()],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    total_s = time.perf_counter() - started
    data = json.loads(out.stdout.strip().splitlines()[-1])
    start_s = total_s - data.pop("measured_s")  # Python, torch and the package imported
    return StepTiming(data["startup_s"] + start_s, data["step_s"], data["steps"])


def measure(cell: Cell) -> StepTiming:
    """Time the cell's parts on this machine (its settings' threads), nothing logged."""
    import torch

    from gppo.backends.cell_loss import make_loss
    from gppo.backends.local.settings import LocalSettings
    from gppo.backends.local.train import Trainer
    from gppo.testbed.answer_prob import answer_summary, probe_problems
    from gppo.testbed.evaluate import evaluate
    from gppo.testbed.tasks import get_domain
    from gppo.testbed.warmstart import load_base_model

    s = LocalSettings.model_validate(cell.settings)
    threads = torch.get_num_threads()
    torch.set_num_threads(s.num_threads)
    try:
        t0 = time.perf_counter()
        domain = get_domain(s.domain)
        benchmarks = list(cell.benchmarks) or list(domain.benchmark_names)
        policy = load_base_model(s, say=lambda _line: None).policy
        base_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        evaluate(policy, domain, benchmarks, cell.eval_k, s.eval_seed, s.eval_prompts)
        eval_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        answer_summary(policy, probe_problems(domain))
        probe_s = time.perf_counter() - t0
        loss_fn, agg = make_loss(cell.method, cell.loss_params)
        trainer = Trainer(policy, domain, s, loss_fn, cell.seed, agg)
        times = []
        for _ in range(1 + TIMED_STEPS):
            t0 = time.perf_counter()
            trainer.step()
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    step_s = sum(times[1:]) / TIMED_STEPS
    evals = 1 + (s.steps // s.eval_every if s.eval_every else 0) + (1 if cell.select else 0)
    probes = sum(M.probe_step(step, s.steps) for step in range(s.steps + 1))
    startup = base_s + evals * eval_s + probes * probe_s + max(0.0, times[0] - step_s)
    return StepTiming(startup, step_s, s.steps)


if __name__ == "__main__":  # the child of measure_in_cell_process: its StepTiming as JSON
    began = time.perf_counter()
    timed = measure(Cell.from_json(sys.argv[1]))
    print(json.dumps({**timed.__dict__, "measured_s": time.perf_counter() - began}))
