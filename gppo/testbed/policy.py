"""A small decoder-only transformer over the character vocabulary, with a KV cache.

Pre-LayerNorm blocks, learned absolute positions, tied input/output embeddings, plain torch
(``F.scaled_dot_product_attention``). Prompts are left-padded; positions count only real tokens,
so a left-padded row sees the same positions as an unpadded one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gppo.testbed.vocab import VOCAB_SIZE

Cache = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class PolicyConfig:
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 64
    vocab_size: int = VOCAB_SIZE

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class Block(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x (B, T, D); mask (B, 1, T, S) bool, True = attend; past k/v (B, H, S - T, D/H)."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        x = x + self.mlp(self.ln2(x))
        return x, (k, v)


class Policy(nn.Module):
    """``forward(ids, valid)`` -> logits (B, T, V); ``step`` runs one cached decoding step."""

    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln_f(x) @ self.tok.weight.T

    def forward(
        self, ids: torch.Tensor, valid: torch.Tensor, return_cache: bool = False
    ) -> tuple[torch.Tensor, Cache | None]:
        """Full causal pass. ids, valid (B, T); padded keys are masked (each token sees itself)."""
        _b, t = ids.shape
        pos = (valid.long().cumsum(1) - 1).clamp(min=0)
        x = self.tok(ids) + self.pos(pos)
        causal = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
        eye = torch.eye(t, dtype=torch.bool, device=ids.device)
        mask = ((causal & valid[:, None, :]) | eye)[:, None]
        cache: Cache = []
        for blk in self.blocks:
            x, kv = blk(x, mask, None)
            cache.append(kv)
        return self._logits(x), (cache if return_cache else None)

    def step(
        self, ids: torch.Tensor, pos: torch.Tensor, key_valid: torch.Tensor, cache: Cache
    ) -> tuple[torch.Tensor, Cache]:
        """One decoding step. ids, pos (B,); key_valid (B, S) incl. the new token -> logits (B, V)."""
        x = self.tok(ids)[:, None] + self.pos(pos)[:, None]
        mask = key_valid[:, None, None, :]
        new: Cache = []
        for blk, past in zip(self.blocks, cache, strict=False):
            x, kv = blk(x, mask, past)
            new.append(kv)
        return self._logits(x)[:, 0], new


@torch.no_grad()
def fold_temperature(policy: Policy, tau: float) -> Policy:
    """``policy`` with a temperature τ folded into its final layer, in place: the final
    LayerNorm's weight and bias divided by τ, so its logits are the old ones divided by τ (the
    output projection is the tied embedding, which the input also reads: it is left alone).

    Exact where it matters: each of the two vectors is divided once, correctly rounded (IEEE), so
    the weights loaded at a τ are the same bits on every machine; for a power-of-two τ the logits
    are exactly the old ones / τ, otherwise within float32 rounding of them (every token's ranking
    kept but for a near-tie within that rounding). τ = 1 changes nothing."""
    if tau != 1.0:
        policy.ln_f.weight.div_(tau)
        policy.ln_f.bias.div_(tau)
    return policy


def response_log_probs(
    policy: Policy,
    prompt_ids: torch.Tensor,
    prompt_valid: torch.Tensor,
    resp_ids: torch.Tensor,
    resp_mask: torch.Tensor,
    entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, R) of the response tokens and the per-token entropy (B, R).

    prompt_ids/valid (B, P) left-padded; resp_ids/mask (B, R) right-padded (mask includes EOS).
    ``entropy=False`` skips the entropy (None): the update needs only the log-probs.
    """
    ids = torch.cat([prompt_ids, resp_ids], dim=1)
    valid = torch.cat([prompt_valid, resp_mask.bool()], dim=1)
    logits, _ = policy(ids, valid)
    p = prompt_ids.shape[1]
    logits = logits[:, p - 1 : -1].float()
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, resp_ids[..., None])[..., 0]
    if not entropy:
        return logp, None
    ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp, ent
