"""The two places where verl 0.9.1 and vLLM 0.32 (CPU build) do not run on a CPU as shipped.

Each function is one work-around, applied in-process and idempotent; the comment names the
upstream line, so each can be dropped when upstream fixes it. Nothing here runs on a GPU machine:
:mod:`gppo.backends.verl.cpu` applies them only when ``VERL_PLATFORM=cpu``.
"""

from __future__ import annotations

import functools
from typing import Any

_APPLIED: set[str] = set()


def _once(name: str) -> bool:
    if name in _APPLIED:
        return False
    _APPLIED.add(name)
    return True


def dedupe_process_group_backend() -> None:
    """verl builds the backend string ``f"cpu:gloo,{device}:{backend}"``
    (``verl/utils/distributed.py:63`` and ``:89``), which on CPU is ``"cpu:gloo,cpu:gloo"`` and
    torch refuses ("Duplicate device type cpu"). Pass ``"cpu:gloo"`` instead. Must run before
    ``verl.workers.engine_workers`` imports the function (``engine_workers.py:38``)."""
    if not _once("process_group_backend"):
        return
    import torch.distributed
    from verl.utils import distributed

    original_ray = distributed.initialize_global_process_group_ray

    @functools.wraps(original_ray)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original_ray(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    original_init = torch.distributed.init_process_group

    @functools.wraps(original_init)
    def init_process_group(*args: Any, backend: Any = None, **kwargs: Any) -> Any:
        if backend == "cpu:gloo,cpu:gloo":
            backend = "cpu:gloo"
        # (verl passes backend by keyword, so *args never holds it)
        return original_init(*args, backend=backend, **kwargs)  # type: ignore[misc]  # backend: keyword only here

    def initialize_global_process_group(timeout_second=36000):
        # verl/utils/distributed.py:62: the same string, passed straight to torch
        saved = torch.distributed.init_process_group
        torch.distributed.init_process_group = init_process_group
        try:
            return original_global(timeout_second)
        finally:
            torch.distributed.init_process_group = saved

    original_global = distributed.initialize_global_process_group
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray
    distributed.initialize_global_process_group = initialize_global_process_group


def keep_vllm_weights_live() -> None:
    """vLLM's CPU build packs each linear layer's weight for its GEMM kernels after loading, and
    for ``UnquantizedLinearMethod`` drops the parameter (``remove_weight=True``,
    ``vllm/model_executor/layers/linear.py:216``; the LM head keeps it but computes with the
    packed copy, ``vocab_parallel_embedding.py:71``). verl's per-step weight sync reloads the
    parameters (``verl/workers/rollout/vllm_rollout/utils.py:405``, ``model.load_weights``): with
    the weight gone it fails ("no attribute weight_loader"), and with a packed copy the rollout
    would keep sampling from the step-0 weights. So every 2-D weight computes with plain
    ``F.linear`` on its live parameter: vLLM's own fallback for layers it does not pack
    (``_cpu_skip_gemm_dispatch``, ``linear.py:209-212``). Slower, and exact after every sync."""
    if not _once("vllm_weights"):
        return
    import torch
    from vllm.model_executor.layers import utils

    original = utils.dispatch_cpu_unquantized_gemm

    @functools.wraps(original)
    def dispatch_cpu_unquantized_gemm(layer: Any, remove_weight: bool) -> None:
        if getattr(layer, "weight", None) is not None and layer.weight.ndim == 2:
            layer.cpu_linear = torch.nn.functional.linear
            return
        original(layer, remove_weight)

    utils.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
