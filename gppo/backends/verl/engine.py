"""verl's FSDP engine in this process, on a GPU or a CPU: a single-rank process group and
``FSDPEngineWithLMHead`` built on a local model (the engine checks of ``gppo-sweep check``, the
GPU check and the engine tests). Nothing here knows the device: on a machine without a GPU,
install the CPU platform first (:func:`gppo.backends.verl.cpu.platform.install_cpu_platform`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from gppo.ports import free_port


def init_single_process_group(port: int | None = None) -> None:
    """A world of one rank (gloo on CPU, nccl when CUDA is there), as torchrun would set it up;
    its rendezvous on ``port``, else on ``MASTER_PORT`` when set, else on a free port (a fixed
    default failed with EADDRINUSE when two checks or test runs shared the machine)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    chosen = port or int(os.environ.get("MASTER_PORT") or free_port())
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(chosen), "RANK": "0", "WORLD_SIZE": "1"}
    env["LOCAL_RANK"] = "0"
    for key, value in env.items():
        os.environ.setdefault(key, value)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, rank=0, world_size=1)


def build_engine(
    model_dir: Path,
    *,
    param_dtype: str = "bf16",
    lr: float = 1e-3,
    use_remove_padding: bool = True,
    attn_implementation: str = "sdpa",
) -> Any:
    """verl's ``FSDPEngineWithLMHead`` on ``model_dir``, initialised (FSDP2 model + optimiser).

    Built directly: verl's ``EngineRegistry`` lists it for cuda/npu only. ``param_dtype`` is
    FSDP's mixed-precision parameter dtype (``bf16``: the engine's autocast, as in training;
    ``fp32``: no autocast).
    """
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    model_config = HFModelConfig(
        path=str(model_dir),
        use_remove_padding=use_remove_padding,
        override_config={"attn_implementation": attn_implementation},
    )
    engine_config = FSDPEngineConfig(
        strategy="fsdp2",
        use_torch_compile=False,
        mixed_precision={
            "param_dtype": param_dtype,
            "reduce_dtype": "fp32",
            "buffer_dtype": "fp32",
        },
    )
    optim_config = FSDPOptimizerConfig(lr=lr)
    engine = FSDPEngineWithLMHead(model_config, engine_config, optim_config, CheckpointConfig())
    engine.initialize()
    return engine
