"""Character vocabulary shared by both domains of the CPU testbed.

Token 0 is padding, token 1 ends a response; every other token is one printable character.
"""

from __future__ import annotations

import torch

PAD = 0
EOS = 1
_CHARS = "0123456789+-*=>;:,|[]abcdefghijklmnopqrstuvwxyz "
#: Characters the vocabulary knows (index = token id - 2).
CHARS: str = _CHARS
VOCAB_SIZE: int = len(_CHARS) + 2
_TO_ID = {c: i + 2 for i, c in enumerate(_CHARS)}


def encode(text: str) -> list[int]:
    """Token ids of ``text`` (no EOS); unknown characters raise ``KeyError``."""
    try:
        return [_TO_ID[c] for c in text]
    except KeyError as exc:
        raise KeyError(f"character {exc.args[0]!r} is not in the testbed vocabulary") from None


def decode(ids: list[int] | torch.Tensor) -> str:
    """Text of ``ids`` up to (not including) the first EOS; padding is skipped."""
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    out = []
    for i in ids:
        if i == EOS:
            break
        if i != PAD:
            out.append(_CHARS[i - 2])
    return "".join(out)


def left_pad(batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad prompts to one width: ``(ids (B, T), valid (B, T) bool)``."""
    width = max(len(x) for x in batch)
    ids = torch.full((len(batch), width), PAD, dtype=torch.long)
    for row, x in enumerate(batch):
        if x:
            ids[row, width - len(x) :] = torch.tensor(x, dtype=torch.long)
    return ids, ids != PAD
