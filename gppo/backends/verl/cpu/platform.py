"""verl on a machine without a GPU: a CPU platform for verl's platform layer.

verl 0.9 has no CPU platform and falls back to ``nvidia``; its platform layer lets a caller
register one (``PlatformRegistry.register``, chosen with ``VERL_PLATFORM=cpu``) or install one
(``platform_manager.set_platform``). :class:`CPUPlatform` is that platform: device ``cpu``,
collectives over ``gloo``, and a device module (:data:`CPU_DEVICE`) with the ``torch.cuda``-style
calls verl makes. Install it with :func:`install_cpu_platform` (one process, no Ray) before
``verl.workers.engine.fsdp`` is imported (that module reads the device name at import time); for
the whole trainer, :mod:`gppo.backends.verl.cpu` registers it in every process. On a GPU machine
none of this is loaded: verl's own CUDA platform is used (the single-rank process group and the
engine of the checks are :mod:`gppo.backends.verl.engine`'s, on either device).
"""

from __future__ import annotations

import contextlib
import resource
import sys
import types
from typing import Any

import torch

from gppo.errors import BackendError

PLATFORM_NAME = "cpu"


class _CPUDeviceModule(types.ModuleType):
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on its device module
    (``get_torch_device()``): memory statistics on every training step
    (``verl/workers/engine_workers.py:219-220``), the device name of its flops counter
    (``utils/flops_counter.py:80``), cache and IPC calls of the weight sync
    (``workers/rollout/vllm_rollout/bucketed_weight_transfer.py:220-221``), RNG state of the
    checkpoint manager (``utils/checkpoint/checkpoint_manager.py:208,219``). Memory figures are the process's peak resident set (there is no
    allocator to ask)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def _peak_rss_bytes() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

    def max_memory_allocated(self, device: Any = None) -> int:
        return self._peak_rss_bytes()

    max_memory_reserved = max_memory_allocated
    memory_allocated = max_memory_allocated
    memory_reserved = max_memory_allocated

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        import psutil

        memory = psutil.virtual_memory()
        return memory.available, memory.total

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def ipc_collect(self) -> None:
        return None

    def synchronize(self, device: Any = None) -> None:
        return None

    def set_device(self, device: Any) -> None:
        return None

    def current_device(self) -> int:
        return 0

    def get_device_name(self, device: Any = None) -> str:
        return "CPU"  # what verl's flops counter calls torch.cpu (verl/utils/flops_counter.py:77)

    def set_per_process_memory_fraction(self, fraction: float, device: Any = None) -> None:
        return None

    def device_count(self) -> int:
        return 1

    def is_available(self) -> bool:
        return True

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)


#: The device module of :class:`CPUPlatform`.
CPU_DEVICE = _CPUDeviceModule("gppo_cpu_device")


def _platform_class() -> type:
    from verl.plugin.platform.platform_base import PlatformBase

    class CPUPlatform(PlatformBase):
        """verl platform for a CPU-only process (every device call is a no-op or ``cpu``)."""

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = CPU_DEVICE

        def is_available(self) -> bool:
            return True

        def current_device(self) -> Any:
            return "cpu"  # an int index would make verl move the model to cuda:<index>

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
            return (None, None)

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CPU_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            # "GPU", not "CPU": verl asks Ray for GPU bundles whatever the platform says
            # (verl/single_controller/ray/base.py:146,210,230 and
            # workers/rollout/vllm_rollout/vllm_async_server.py:1348), so a CPU run gives its Ray
            # head fake GPUs (`ray start --num-gpus`) and each worker takes one.
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False  # weight sync through POSIX shared memory, not CUDA IPC

        def cudart(self) -> None:
            return None

    return CPUPlatform


def register_cpu_platform() -> type:
    """Register :class:`CPUPlatform` as verl platform ``cpu`` (selected by ``VERL_PLATFORM=cpu``)."""
    from verl.plugin.platform.platform_manager import PlatformRegistry

    existing = PlatformRegistry.get(PLATFORM_NAME)
    if existing is not None and existing.__module__ == __name__:
        return existing
    return PlatformRegistry.register(platform=PLATFORM_NAME)(_platform_class())


_INSTALLED: Any = None


class PlatformTooLate(BackendError, RuntimeError):
    """verl's engine module was imported before the CPU platform was installed."""


def install_cpu_platform() -> Any:
    """Make verl's current platform the CPU one (idempotent); returns it.

    Raises :class:`PlatformTooLate` when ``verl.workers.engine.fsdp.transformer_impl`` was already
    imported with another device name (it caches it at import time).
    """
    global _INSTALLED
    from verl.plugin.platform import platform_manager

    if _INSTALLED is not None:
        return _INSTALLED
    impl = sys.modules.get("verl.workers.engine.fsdp.transformer_impl")
    if impl is not None and getattr(impl, "device_name", "cpu") != "cpu":
        raise PlatformTooLate(
            "verl.workers.engine.fsdp was imported with device "
            f"{impl.device_name!r} before install_cpu_platform(); install it first"
        )
    _INSTALLED = register_cpu_platform()()
    platform_manager.set_platform(_INSTALLED)
    return _INSTALLED
