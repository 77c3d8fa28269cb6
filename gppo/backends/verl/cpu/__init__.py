"""verl's whole trainer on a CPU (smoke runs and pre-flight on a laptop or in CI, not training):
loaded in every process that imports verl, and only when the run asks for it.

The plugin module (:mod:`gppo.backends.verl.plugin`, verl's ``verl.plugins`` entry point, imported
by verl's ``__init__`` in the driver, the TaskRunner, every FSDP worker and the vLLM server and
its worker processes) calls :func:`activate_if_requested` first; vLLM calls :func:`vllm_plugin`
in each of its processes (its ``vllm.general_plugins`` entry point, pyproject.toml). With
``VERL_PLATFORM=cpu`` (the CPU preset's environment, :data:`CPU_ENV`) they register verl platform
``cpu`` (:mod:`.platform`) and apply :mod:`.patches`; with anything else they do nothing, so a GPU
run never loads these pieces.
"""

from __future__ import annotations

import os

#: The environment of a verl CPU run (the verl ``cpu: true`` setting adds it to the job).
CPU_ENV: dict[str, str] = {
    "VERL_PLATFORM": "cpu",  # verl's platform switch: our CPUPlatform (platform_manager.py:92)
    # verl registers its FSDP engine for cuda/npu only; this is verl's own switch to use it
    # (verl/workers/engine/fsdp/transformer_impl.py:1143)
    "VERL_ENGINE_DEVICE": "cuda",
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache (vLLM's CPU default is 4)
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # no core pinning on a shared 2-core machine
}

_ACTIVE = False


def requested() -> bool:
    """Whether this process belongs to a verl CPU run."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"


def activate_if_requested() -> bool:
    """Register the CPU platform and apply the patches when :func:`requested`; returns whether
    the CPU mode is active. Idempotent."""
    global _ACTIVE
    if _ACTIVE or not requested():
        return _ACTIVE
    from gppo.backends.verl.cpu import patches
    from gppo.backends.verl.cpu.platform import register_cpu_platform

    register_cpu_platform()
    patches.dedupe_process_group_backend()
    _ACTIVE = True
    return True


def vllm_plugin() -> None:
    """vLLM's general plugin hook (``vllm.general_plugins``): in a verl run (our verl plugin in
    ``VERL_USE_EXTERNAL_MODULES``), let verl serve models without an inner ``.model``
    (:mod:`gppo.backends.verl.compat`); in a verl CPU run, also keep the rollout engine's
    weights reloadable (:func:`.patches.keep_vllm_weights_live`)."""
    if "gppo.backends.verl.plugin" in os.environ.get("VERL_USE_EXTERNAL_MODULES", ""):
        from gppo.backends.verl.compat import tolerate_models_without_inner_model

        tolerate_models_without_inner_model()
    if requested():
        from gppo.backends.verl.cpu import patches

        patches.keep_vllm_weights_live()
