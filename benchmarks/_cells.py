"""Helpers shared by the testbed benchmarks: run cells as real entry-point subprocesses."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class CellResult:
    args: list[str]
    wall_s: float
    summary: dict[str, Any]


def launch(args: list[str], workdir: str) -> tuple[subprocess.Popen, str, float]:
    fd, out = tempfile.mkstemp(suffix=".json", dir=workdir)
    os.close(fd)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "gppo.backends.local", "--quiet", "--summary-json", out, *args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, out, time.perf_counter()


def run_many(jobs: list[list[str]], parallel: int, workdir: str) -> list[CellResult]:
    """Run entry-point cells, ``parallel`` at a time; results in job order."""
    results: dict[int, CellResult] = {}
    pending = list(enumerate(jobs))
    running: list[tuple[int, subprocess.Popen, str, float]] = []
    while pending or running:
        while pending and len(running) < parallel:
            i, args = pending.pop(0)
            running.append((i, *launch(args, workdir)))
        time.sleep(0.05)
        for item in list(running):
            i, proc, out, t0 = item
            if proc.poll() is None:
                continue
            running.remove(item)
            err = proc.stderr.read().decode() if proc.stderr else ""
            if proc.returncode != 0:
                raise RuntimeError(f"cell {jobs[i]} failed:\n{err[-3000:]}")
            with open(out) as fh:
                results[i] = CellResult(jobs[i], time.perf_counter() - t0, json.load(fh))
    return [results[i] for i in range(len(jobs))]


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def ensure_base(domain: str, extra: list[str]) -> float:
    """Build (or load) the cached base model once, outside the timed runs; returns seconds."""
    t0 = time.perf_counter()
    code = (
        "import sys, torch; torch.set_num_threads(1);"
        "from gppo.backends.local.settings import LocalSettings;"
        "from gppo.testbed.warmstart import load_base_model;"
        "import json; kw = json.loads(sys.argv[1]);"
        "print(load_base_model(LocalSettings(domain=sys.argv[2], **kw)).source)"
    )
    kw: dict[str, Any] = {}
    for k, v in zip(extra[::2], extra[1::2], strict=False):
        if k == "--set":
            key, _, val = v.partition("=")
            try:
                kw[key] = json.loads(val)
            except json.JSONDecodeError:
                kw[key] = val
    subprocess.run([sys.executable, "-c", code, json.dumps(kw), domain], check=True)
    return time.perf_counter() - t0
