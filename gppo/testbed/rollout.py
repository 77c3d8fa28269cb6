"""Batched sampling with a KV cache: all prompts x G samples decoded together.

Returns the behaviour log-probs (the sampling policy's log-probs of the sampled tokens, at the
sampling temperature) that the importance ratios r = π/μ (docs/conventions.md) are taken against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gppo.testbed.policy import Policy
from gppo.testbed.vocab import EOS, PAD, decode, encode, left_pad


@dataclass
class Rollout:
    """A batch of B = prompts x G sampled responses (row i belongs to prompt i // G).

    prompt_ids/prompt_valid (B, P) left-padded; resp_ids/resp_mask (B, R) right-padded, the mask
    covers every generated token including EOS; old_log_prob and entropy (B, R).
    """

    prompt_ids: torch.Tensor
    prompt_valid: torch.Tensor
    resp_ids: torch.Tensor
    resp_mask: torch.Tensor
    old_log_prob: torch.Tensor
    entropy: torch.Tensor
    texts: list[str]

    @property
    def n_tokens(self) -> int:
        return int(self.resp_mask.sum())


@torch.no_grad()
def sample(
    policy: Policy,
    prompts: list[str],
    n_samples: int,
    max_new_tokens: int,
    generator: torch.Generator,
    temperature: float = 1.0,
) -> Rollout:
    """Sample ``n_samples`` responses per prompt (rows grouped by prompt)."""
    was_training = policy.training
    policy.eval()
    # the prefill runs once per prompt; its G samples share its logits and KV cache (rows
    # repeated: B = prompts x G, row i belongs to prompt i // G)
    ids, valid = left_pad([encode(p) for p in prompts])
    logits, cache = policy(ids, valid, return_cache=True)
    ids, valid = ids.repeat_interleave(n_samples, 0), valid.repeat_interleave(n_samples, 0)
    last = logits[:, -1].repeat_interleave(n_samples, 0)
    cache = [
        (k.repeat_interleave(n_samples, 0), v.repeat_interleave(n_samples, 0)) for k, v in cache
    ]
    b = ids.shape[0]
    pos = valid.sum(1)
    key_valid = valid
    done = torch.zeros(b, dtype=torch.bool)
    toks, lps, ents, masks = [], [], [], []
    for j in range(max_new_tokens):
        logp_all = torch.log_softmax(last.float() / temperature, dim=-1)
        probs = logp_all.exp()
        tok = torch.multinomial(probs, 1, generator=generator)[:, 0]
        live = ~done
        tok = torch.where(live, tok, torch.full_like(tok, PAD))
        toks.append(tok)
        masks.append(live)
        lps.append(torch.where(live, logp_all.gather(-1, tok[:, None])[:, 0], 0.0))
        ents.append(torch.where(live, -(probs * logp_all).sum(-1), 0.0))
        done = done | (tok == EOS)
        if bool(done.all()) or j == max_new_tokens - 1:
            break
        key_valid = torch.cat([key_valid, live[:, None]], dim=1)
        last, cache = policy.step(tok, pos.clamp(max=policy.cfg.max_len - 1), key_valid, cache)
        pos = pos + 1
    policy.train(was_training)
    resp = torch.stack(toks, 1)
    return Rollout(
        prompt_ids=ids,
        prompt_valid=valid,
        resp_ids=resp,
        resp_mask=torch.stack(masks, 1).float(),
        old_log_prob=torch.stack(lps, 1),
        entropy=torch.stack(ents, 1),
        texts=[decode(r) for r in resp],
    )


def completed(rollout: Rollout) -> torch.Tensor:
    """(B,) bool: the response ended with EOS (a truncated one is never correct)."""
    return (rollout.resp_ids == EOS).any(1)
