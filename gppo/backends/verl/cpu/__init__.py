"""verl's whole trainer on a CPU (smoke runs and pre-flight on a laptop or in CI, not training),
in one place.

:data:`CPU_MODE` (a :class:`CpuMode`) is everything a ``verl.cpu: true`` cell changes on the
launching machine: the job's environment (:data:`CPU_ENV`), the Hydra overrides
(:data:`CPU_OVERRIDES`), the Python that runs the job and the check that it has vLLM's CPU build,
and the resources of the local Ray head, fake GPUs included (verl asks Ray for GPU bundles);
:func:`activate_if_requested` is what it changes inside each process of the run (verl platform
``cpu``, :mod:`.platform`, and the work-arounds of :mod:`.patches`).

Who loads it: the verl backend's modules import it only inside functions, for a CPU cell, and
the verl plugin only in a process of a CPU run (``VERL_PLATFORM=cpu``,
:func:`gppo.backends.verl.hooks.cpu_run`), so importing the backend, its settings, its GPU check
or its plugin loads nothing from here (tests/backends/verl/test_verl_cpu_mode.py), and a GPU
run never loads it (vLLM's hook is :func:`gppo.backends.verl.hooks.vllm_plugin`).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gppo.cell import Resources
from gppo.errors import BackendError

if TYPE_CHECKING:
    from gppo.backends.verl.settings import VerlSettings

#: The environment of a verl CPU run (added to the job's; the spec's ``verl.env`` wins).
CPU_ENV: Mapping[str, str] = MappingProxyType(
    {
        "VERL_PLATFORM": "cpu",  # verl's platform switch: our CPUPlatform (platform_manager.py:92)
        # verl registers its FSDP engine for cuda/npu only; this is verl's own switch to use it
        # (verl/workers/engine/fsdp/transformer_impl.py:1143)
        "VERL_ENGINE_DEVICE": "cuda",
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache (vLLM's CPU default is 4)
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # no core pinning on a shared 2-core machine
    }
)

#: What a verl CPU run changes in verl's config beside the cell's own settings: no CUDA kernels,
#: compile, sleep mode or CUDA-IPC weight sync; one process for each of the rollout agent,
#: reward and data loader (2 cores); vLLM's batch bounded for a small KV cache. Applied after
#: the cell's overrides (``rollout_max_num_seqs``, when set, still wins).
CPU_OVERRIDES: Mapping[str, Any] = MappingProxyType(
    {
        "trainer.device": "cpu",
        "trainer.use_v1": False,  # the v1 trainer needs TransferQueue, not in the CPU environment
        "actor_rollout_ref.actor.strategy": "fsdp2",
        "actor_rollout_ref.actor.use_torch_compile": False,
        "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        "actor_rollout_ref.rollout.enforce_eager": True,
        "actor_rollout_ref.rollout.free_cache_engine": False,
        "+actor_rollout_ref.rollout.enable_sleep_mode": False,
        "actor_rollout_ref.rollout.max_num_seqs": 16,
        "actor_rollout_ref.rollout.max_num_batched_tokens": 1024,
        "actor_rollout_ref.rollout.agent.num_workers": 1,
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": 16,
        "reward.num_workers": 1,
        "data.dataloader_num_workers": 0,
    }
)


class CPUEnvironmentMissing(BackendError):
    """A verl CPU spec launched from a Python without vLLM (one line; nothing submitted)."""


@dataclass(frozen=True)
class CpuMode:
    """What ``verl.cpu: true`` changes on the launching machine, derived from the cell's settings.

    Attributes:
        env: added to the job's environment (:data:`CPU_ENV`).
        overrides: added to the cell's Hydra overrides (:data:`CPU_OVERRIDES`).
        ray_cpus: Ray's logical CPUs one CPU cell's trainer takes (its TaskRunner, FSDP worker,
            vLLM server, reward and agent-loop actors), whatever the machine has.
    """

    env: Mapping[str, str] = field(default_factory=lambda: CPU_ENV)
    overrides: Mapping[str, Any] = field(default_factory=lambda: CPU_OVERRIDES)
    ray_cpus: int = 8

    def python(self, settings: VerlSettings) -> str:
        """The Python that runs the job: ``verl.python``, else the launcher's own (the verl CPU
        environment runs cells on this machine, where its interpreter is)."""
        return settings.python or sys.executable

    def job_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The job's environment: :attr:`env` under ``env`` (the spec's ``verl.env`` wins)."""
        return {**self.env, **env}

    def local_head(self, settings: VerlSettings) -> Resources:
        """What one CPU cell needs of a Ray head: :attr:`ray_cpus` CPUs and one fake GPU per
        verl worker (``nnodes * gpus_per_node``): verl asks Ray for GPU bundles on every
        platform (:meth:`.platform.CPUPlatform.ray_resource_name`)."""
        return Resources(num_cpus=float(self.ray_cpus), num_gpus=float(settings.n_gpus))

    def ray_init_overrides(self, settings: VerlSettings) -> tuple[str, ...]:
        """The same resources for a Ray verl starts itself (no cluster: ``check --train-step``)."""
        head = self.local_head(settings)
        return (
            f"+ray_kwargs.ray_init.num_gpus={int(head.num_gpus)}",
            f"ray_kwargs.ray_init.num_cpus={int(head.num_cpus)}",
        )

    def check_environment(self, settings: VerlSettings) -> None:
        """Raise :class:`CPUEnvironmentMissing` when the job would run in this Python (no
        ``verl.python``) and it has no vLLM."""
        if settings.python is None and importlib.util.find_spec("vllm") is None:
            raise CPUEnvironmentMissing(
                "verl.cpu: true runs verl and vLLM's CPU build in this Python, which has no vLLM: "
                "create the verl CPU environment with scripts/verl-cpu-env.sh and launch with "
                ".venv-verl-cpu/bin/gppo-sweep"
            )


#: The verl CPU mode.
CPU_MODE = CpuMode()

_ACTIVE = False


def activate_if_requested() -> bool:
    """In a process of a CPU run (:func:`gppo.backends.verl.hooks.cpu_run`): register the CPU
    platform and apply the patches; returns whether the CPU mode is active. Idempotent."""
    global _ACTIVE
    from gppo.backends.verl.hooks import cpu_run

    if _ACTIVE or not cpu_run():
        return _ACTIVE
    from gppo.backends.verl.cpu import patches
    from gppo.backends.verl.cpu.platform import register_cpu_platform

    register_cpu_platform()
    patches.dedupe_process_group_backend()
    _ACTIVE = True
    return True
