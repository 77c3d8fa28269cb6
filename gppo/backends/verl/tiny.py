"""A tiny random Qwen2 causal LM and its byte-level tokenizer, built locally (nothing downloaded):
the model of the engine checks, the GPU check and the smoke assets."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import Qwen2Tokenizer

import torch

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


def tiny_tokenizer() -> Qwen2Tokenizer:
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
        unk_token=None,  # type: ignore[arg-type]  # none: the byte vocabulary covers every input
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
        max_position_embeddings=4096,  # room for real prompts (check --train-step)
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
