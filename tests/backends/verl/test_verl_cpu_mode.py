"""The verl CPU mode's pieces (gppo.backends.verl.cpu), in fresh processes that import verl the
way its trainer does: loaded through the ``verl.plugins`` entry point only when
``VERL_PLATFORM=cpu``, and then giving verl a CPU device, GPU bundles for Ray and a process group
torch accepts; importing the verl backend's modules loads none of it; one object (CPU_MODE)
makes a cell a CPU cell. The whole trainer on CPU is tests/backends/verl/test_verl_cpu_launch.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gppo.backends.verl.cpu import CPU_ENV, CPU_MODE, CPU_OVERRIDES

REPO = Path(__file__).resolve().parents[3]
slow = pytest.mark.slow  # the test starts a Python that imports verl

PROBE = r"""
import json, os, sys
import verl  # loads the verl.plugins entry points, as every verl process does
from verl.utils.device import get_device_name, get_nccl_backend, get_resource_name, get_torch_device
out = {
    "cpu_modules": sorted(m for m in sys.modules if m.startswith("gppo.backends.verl.cpu")),
    "device": get_device_name(),
    "resource": get_resource_name(),
    "backend": get_nccl_backend(),
}
if out["device"] == "cpu":
    import torch.distributed as dist
    from verl.utils.distributed import initialize_global_process_group_ray
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1")
    initialize_global_process_group_ray()  # verl builds "cpu:gloo,cpu:gloo" here
    t = __import__("torch").ones(3)
    dist.all_reduce(t)
    out["all_reduce"] = t.tolist()
    out["peak_rss_gb"] = get_torch_device().max_memory_allocated() / 2**30
print("RESULT " + json.dumps(out))
"""


def _probe(env_extra: dict[str, str]) -> dict:
    from gppo.ports import free_port

    env = {k: v for k, v in os.environ.items() if k not in CPU_ENV}
    env.update(env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(free_port())],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


@slow
def test_a_gpu_run_never_loads_the_cpu_pieces():
    out = _probe({})
    assert out["cpu_modules"] == []
    assert out["device"] != "cpu"


@slow
def test_the_cpu_run_gets_verls_cpu_platform_and_a_working_process_group():
    out = _probe(CPU_ENV)
    assert "gppo.backends.verl.cpu.platform" in out["cpu_modules"]
    assert (out["device"], out["resource"], out["backend"]) == ("cpu", "GPU", "gloo")
    assert out["all_reduce"] == [1.0, 1.0, 1.0]
    assert out["peak_rss_gb"] > 0.05  # the process's real peak, not a 0 placeholder


IMPORTS = r"""
import json, sys
import gppo.backends.verl.backend, gppo.backends.verl.settings, gppo.backends.verl.overrides
import gppo.backends.verl.gpucheck, gppo.backends.verl.hooks
import gppo.backends.verl.plugin  # imports verl (and loads its entry points) too
print("RESULT " + json.dumps(sorted(m for m in sys.modules if m.startswith("gppo.backends.verl.cpu"))))
"""


@slow
def test_importing_the_backend_its_settings_gpu_check_and_plugin_loads_nothing_of_the_cpu_mode():
    env = {k: v for k, v in os.environ.items() if k not in CPU_ENV}
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTS], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    assert json.loads(line.removeprefix("RESULT ")) == []


def test_a_cpu_cell_gets_the_cpu_modes_environment_overrides_python_and_local_head():
    """``verl.cpu: true`` is the CPU mode's, whole: the job's env and overrides, the launcher's
    Python, and a local head with one fake GPU per verl worker; a GPU cell gets none of it."""
    from helpers import make_cell

    from gppo.backends.base import get_backend
    from gppo.backends.verl.settings import VerlSettings

    backend = get_backend("verl")
    base = {
        "smoke_assets": True,
        "gpus_per_node": 2,
        "prompts_per_step": 2,
        "mini_batch_prompts": 2,
    }
    for cpu in (True, False):
        settings = VerlSettings(cpu=cpu, **base)
        cell = make_cell(backend="verl", settings=settings.model_dump(), benchmarks=("smoke",))
        job = backend.job(cell)
        overrides = dict(a.split("=", 1) for a in job.argv[job.argv.index("--") + 1 :])
        head = backend.local_head_resources(settings)
        if cpu:
            assert {k: job.env[k] for k in CPU_ENV} == dict(CPU_ENV)
            assert overrides["trainer.device"] == "cpu"
            assert set(CPU_OVERRIDES) <= set(overrides)
            assert job.argv[0] == sys.executable
            assert (head.num_gpus, head.num_cpus) == (2, CPU_MODE.ray_cpus)
        else:
            assert not set(CPU_ENV) & set(job.env)
            assert not set(CPU_OVERRIDES) & set(overrides)
            assert job.argv[0] == "python"
            assert head is None


def test_the_local_head_of_a_cpu_sweep_gets_its_fake_gpus_from_the_settings(tmp_path):
    """No ``ray.local_head`` in the spec: the launcher's head gets the CPU mode's Ray CPUs and one
    fake GPU per verl worker for each cell that may run at once; what the spec writes wins; a GPU
    sweep's head is left to what Ray detects."""
    import yaml

    from gppo.grid.load import load_plan
    from gppo.sweep.cluster.connect import local_head_for

    preset = yaml.safe_load((REPO / "configs" / "verl-cpu-smoke.yaml").read_text())
    preset["ray"].pop("local_head", None)

    def head(ray=None, **verl):
        spec = {
            **preset,
            "verl": {**preset["verl"], **verl},
            "ray": {**preset["ray"], **(ray or {})},
        }
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        plan = load_plan(path)
        found = local_head_for(plan.spec, plan.cells)
        return found.num_cpus, found.num_gpus

    assert head() == (CPU_MODE.ray_cpus, 1)  # the preset: one cell at a time, one worker
    assert head(ray={"max_concurrent": 2}, gpus_per_node=2) == (2 * CPU_MODE.ray_cpus, 4)
    assert head(ray={"max_concurrent": 5}) == (2 * CPU_MODE.ray_cpus, 2)  # two cells in all
    assert head(ray={"local_head": {"num_gpus": 3}}) == (CPU_MODE.ray_cpus, 3)
    assert head(cpu=False) == (None, None)
