"""What verl and vLLM call in each of their processes, and the one test of a CPU run's process.

Light on purpose (nothing of verl, vLLM or :mod:`gppo.backends.verl.cpu` is imported until a
hook needs it): the verl plugin calls :func:`cpu_run` first thing, and vLLM calls
:func:`vllm_plugin` in every process it starts, on a GPU too.
"""

from __future__ import annotations

import os

#: verl's platform switch (``verl/plugin/platform/platform_manager.py``); ``cpu`` in a CPU run
#: (:data:`gppo.backends.verl.cpu.CPU_ENV`).
PLATFORM_VAR = "VERL_PLATFORM"


def cpu_run() -> bool:
    """Whether this process belongs to a verl CPU run (``VERL_PLATFORM=cpu``)."""
    return os.environ.get(PLATFORM_VAR, "").strip().lower() == "cpu"


def vllm_plugin() -> None:
    """vLLM's general plugin hook (``vllm.general_plugins``): in a verl run (our verl plugin in
    ``VERL_USE_EXTERNAL_MODULES``), let verl serve models without an inner ``.model``
    (:mod:`gppo.backends.verl.compat`); in a verl CPU run, also keep the rollout engine's
    weights reloadable (:func:`gppo.backends.verl.cpu.patches.keep_vllm_weights_live`)."""
    if "gppo.backends.verl.plugin" in os.environ.get("VERL_USE_EXTERNAL_MODULES", ""):
        from gppo.backends.verl.compat import tolerate_models_without_inner_model

        tolerate_models_without_inner_model()
    if cpu_run():
        import gppo.backends.verl.cpu.patches

        gppo.backends.verl.cpu.patches.keep_vllm_weights_live()
