"""The verl CPU mode's pieces (gppo.backends.verl.cpu), in fresh processes that import verl the
way its trainer does: loaded through the ``verl.plugins`` entry point only when
``VERL_PLATFORM=cpu``, and then giving verl a CPU device, GPU bundles for Ray and a process group
torch accepts. The whole trainer on CPU is tests/backends/verl/test_verl_cpu_launch.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gppo.backends.verl.cpu import CPU_ENV

pytestmark = pytest.mark.slow  # each test starts a Python that imports verl

PROBE = r"""
import json, os, sys
import verl  # loads the verl.plugins entry points, as every verl process does
from verl.utils.device import get_device_name, get_nccl_backend, get_resource_name, get_torch_device
out = {
    "cpu_modules": sorted(m for m in sys.modules if m.startswith("gppo.backends.verl.cpu.")),
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
    from gppo.sweep.cluster import free_port

    env = {k: v for k, v in os.environ.items() if k not in CPU_ENV}
    env.update(env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(free_port())],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_a_gpu_run_never_loads_the_cpu_pieces():
    out = _probe({})
    assert out["cpu_modules"] == []
    assert out["device"] != "cpu"


def test_the_cpu_run_gets_verls_cpu_platform_and_a_working_process_group():
    out = _probe(CPU_ENV)
    assert "gppo.backends.verl.cpu.platform" in out["cpu_modules"]
    assert (out["device"], out["resource"], out["backend"]) == ("cpu", "GPU", "gloo")
    assert out["all_reduce"] == [1.0, 1.0, 1.0]
    assert out["peak_rss_gb"] > 0.05  # the process's real peak, not a 0 placeholder
