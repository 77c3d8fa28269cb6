"""Run verl's FSDP training engine in one process: a CPU platform for verl's platform layer,
a single-rank process group, and a tiny random causal LM (nothing downloaded).

verl 0.9 has no CPU platform and falls back to ``nvidia``; its platform layer lets a caller
install one (``verl.plugin.platform.platform_manager.set_platform``). :class:`CPUPlatform` is
that platform: device ``cpu``, module ``torch.cpu``, collectives over ``gloo``. Install it with
:func:`install_cpu_platform` before ``verl.workers.engine.fsdp`` is imported (that module reads
the device name at import time). On a GPU machine none of this is needed: verl's own CUDA
platform is used and :func:`init_single_process_group` picks ``nccl``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import torch

from gppo.errors import BackendError


def _platform_class() -> type:
    from verl.plugin.platform.platform_base import PlatformBase

    class CPUPlatform(PlatformBase):
        """verl platform for a CPU-only process (every device call is a no-op or ``cpu``)."""

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = torch.cpu

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
            return "CPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> None:
            return None

    return CPUPlatform


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
    _INSTALLED = _platform_class()()
    platform_manager.set_platform(_INSTALLED)
    return _INSTALLED


def init_single_process_group(port: int = 29533) -> None:
    """A world of one rank (gloo on CPU, nccl when CUDA is there), as torchrun would set it up."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1"}
    env["LOCAL_RANK"] = "0"
    for key, value in env.items():
        os.environ.setdefault(key, value)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, rank=0, world_size=1)


#: The tiny tokenizer's special tokens, after its 256 byte tokens (ids 256, 257, 258): Qwen2's
#: ChatML markers. verl's Qwen continuous-token builder requires ``<|im_end|>``
#: (``verl/utils/tokenizer/continuous_token.py:560``).
TINY_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

#: A ChatML chat template (Qwen2's, without tools or a default system message).
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: vLLM's CPU attention backend rejects smaller heads (the tiny model has 4 heads).
MIN_HEAD_DIM = 32


def _byte_symbols() -> list[str]:
    """The 256 symbols byte-level BPE writes bytes as (GPT-2's ``bytes_to_unicode``), in byte
    order: printable Latin-1 bytes stand for themselves, the others for ``chr(256 + k)``."""
    printable = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    symbols, shifted = [], 0
    for byte in range(256):
        if byte in printable:
            symbols.append(chr(byte))
        else:
            symbols.append(chr(256 + shifted))
            shifted += 1
    return symbols


def tiny_tokenizer() -> Any:
    """A byte-level BPE tokenizer with no merges: token id = byte value for the 256 bytes, then
    :data:`TINY_SPECIAL_TOKENS` (259 tokens), with a ChatML chat template.

    Built as transformers' own ``Qwen2Tokenizer``: transformers 5.x ``AutoTokenizer`` reloads any
    tokenizer saved beside a ``qwen2`` config as that class (rebuilt from the saved vocabulary and
    merges with Qwen2's byte-level pre-tokenizer), so a word-level vocabulary came back encoding
    most text, ``"\\n"`` included, to nothing; verl needs ``"\\n"`` to be exactly one token
    (``verl/utils/tokenizer/continuous_token.py:558``). Every text round-trips through bytes.
    """
    from transformers import Qwen2Tokenizer

    vocab = {symbol: i for i, symbol in enumerate(_byte_symbols())}
    vocab.update({token: 256 + i for i, token in enumerate(TINY_SPECIAL_TOKENS)})
    pad, start, end = TINY_SPECIAL_TOKENS
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=[],
        unk_token=None,
        eos_token=end,
        pad_token=pad,
        additional_special_tokens=[start, end],
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


def tiny_causal_lm(
    path: Path, *, vocab_size: int = 272, hidden: int = 128, layers: int = 2, seed: int = 0
) -> Path:
    """Save a random tiny ``Qwen2ForCausalLM`` (4 heads of ``hidden // 4`` >= 32, 2 KV heads) and
    :func:`tiny_tokenizer` to ``path`` with ``save_pretrained``; built from a ``transformers``
    config, nothing downloaded. ``vocab_size`` (the embedding rows) must cover the tokenizer's
    259 tokens; the default pads it to a multiple of 16, as real checkpoints do."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = tiny_tokenizer()
    if vocab_size < len(tokenizer):
        raise ValueError(f"vocab_size={vocab_size} is below the tokenizer's {len(tokenizer)}")
    if hidden % 4 or hidden // 4 < MIN_HEAD_DIM:
        raise ValueError(f"hidden={hidden}: 4 heads need hidden = 4 x head_dim >= 4 x 32")
    path.mkdir(parents=True, exist_ok=True)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


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
