"""One instruction set for every CPU cell, whatever the launching environment asks for
(:mod:`gppo.testbed.cpu_kernels`, docs/reproducibility.md).

The end-to-end test trains a short cell of the shipped math base (2 iterations, 8 prompts, a capped
evaluation) through the real entry point twice: from this process's environment with the kernel
variables removed, and from one that asks for other kernels (ATen without SIMD, another MKL branch
and ISA, oneDNN at SSE4.1). Pinned, both end at the same bits: every logged float of every step,
the answer probe, the evaluation and the parameters' distance from the base. Natural
(``cpu_kernels=natural``), the same two launches end apart, so the comparison can see a kernel
change at this budget (without the pin the first test fails).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from gppo import metrics as M
from gppo.backends.local.backend import SERVER_ENV, LocalBackend
from gppo.testbed import cpu_kernels

#: kernels other than the pin's, through every variable the libraries read
OTHER_KERNELS = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "DNNL_MAX_CPU_ISA": "SSE41",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
}
SHORT = ("steps=2", "prompts_per_step=8", "minibatches=2", "eval_prompts=8")


def _short_cell(tmp_path, name: str, extra_env: dict[str, str], mode: str) -> dict:
    """The short cell's summary, launched from this environment without the kernel variables
    plus ``extra_env``; ``mode``: its ``cpu_kernels``."""
    out = tmp_path / f"{name}.json"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MLFLOW_") and k not in cpu_kernels.KERNEL_VARS
    }
    env.update(GPPO_CACHE_DIR=str(tmp_path / f"cache-{name}"), OMP_NUM_THREADS="1", **extra_env)
    cmd = [sys.executable, "-m", "gppo.backends.local", "--method", "grpo", "--seed", "0"]
    cmd += ["--domain", "math", "--k", "2", "--no-mlflow", "--quiet", "--summary-json", str(out)]
    for item in (*SHORT, f"cpu_kernels={mode}"):
        cmd += ["--set", item]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _bits(run: dict) -> dict:
    """Everything a cell computed (the timings left out)."""
    return {
        "history": run["history"],
        "probes": run["probes"],
        "evals": run["evals"],
        "delta": run["perf"][M.PERF_PARAM_DELTA_L2],
    }


def _pair(tmp_path, mode: str) -> tuple[dict, dict]:
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(_short_cell, tmp_path, f"{mode}-natural-env", {}, mode)
        b = pool.submit(_short_cell, tmp_path, f"{mode}-other-env", OTHER_KERNELS, mode)
        return _bits(a.result()), _bits(b.result())


@pytest.mark.slow
def test_a_pinned_cell_ends_at_the_same_bits_whatever_kernels_its_environment_asks_for(tmp_path):
    natural_env, other_env = _pair(tmp_path, cpu_kernels.PINNED)
    assert natural_env == other_env


@pytest.mark.slow
def test_the_natural_mode_follows_the_environment(tmp_path):
    natural_env, other_env = _pair(tmp_path, cpu_kernels.NATURAL)
    assert natural_env["delta"] != other_env["delta"]


def test_apply_pins_whatever_the_environment_says_and_natural_leaves_it():
    env = dict(OTHER_KERNELS, MKL_DEBUG_CPU_TYPE="5", PATH="/bin")
    cpu_kernels.apply(cpu_kernels.NATURAL, env)
    assert env == dict(OTHER_KERNELS, MKL_DEBUG_CPU_TYPE="5", PATH="/bin")
    cpu_kernels.apply(cpu_kernels.PINNED, env)
    assert env == {**cpu_kernels.PINNED_ENV, "PATH": "/bin"}


def test_the_job_and_the_fork_server_carry_the_mode(tmp_path):
    """A pinned cell's job env asks for the pin (as the fork server's start env does); a natural
    cell's asks for nothing, and the fork server does not take it (its torch is pinned)."""
    from helpers import make_cell

    backend = LocalBackend()
    pinned = backend.job(make_cell("tv", "mc"))
    natural = backend.job(make_cell("tv", "mc", settings={"cpu_kernels": "natural"}))
    assert {k: pinned.env[k] for k in cpu_kernels.PINNED_ENV} == cpu_kernels.PINNED_ENV
    assert not set(cpu_kernels.KERNEL_VARS) & set(natural.env)
    assert cpu_kernels.same_kernels(pinned.env, SERVER_ENV)
    assert not cpu_kernels.same_kernels(natural.env, SERVER_ENV)


def test_an_unknown_mode_is_refused_naming_the_allowed_ones():
    from gppo.backends.local.settings import LocalSettings

    with pytest.raises(ValueError, match="natural"):
        LocalSettings(cpu_kernels="fast")
    with pytest.raises(ValueError, match="pinned, natural"):
        cpu_kernels.mode_of({"cpu_kernels": "fast"})
