"""The RL loop: GRPO-style group-relative advantages with any method of the objectives registry
(:func:`gppo.backends.cell_loss.make_loss`: the cell's loss, the same losses as the verl path).

One iteration (= one MLflow step):
1. draw ``prompts_per_step`` training prompts (benchmark prompts never occur), sample G
   responses each at the sampling temperature with the current policy (behaviour log-probs μ);
2. 0/1 rewards; advantage of response i in its group: (R_i - mean) / (std + 1e-6), exactly 0 when
   the group's rewards are all equal;
3. ``ppo_epochs`` passes over ``minibatches`` shuffled minibatches, one AdamW step each, with the
   method's loss (token-mean by default) on the current log-probs π vs μ: the later minibatches
   are off-policy, which is what exercises the proximal regions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from gppo.backends.cell_loss import LossFn
from gppo.backends.local.settings import LocalSettings
from gppo.metrics import reduce_step
from gppo.objectives.defaults import LOSS_AGG_MODE
from gppo.testbed.no_dynamo import AdamW
from gppo.testbed.policy import Policy, response_log_probs
from gppo.testbed.rollout import Rollout, completed, sample
from gppo.testbed.tasks import Domain, train_rng


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """(B,) rewards grouped by consecutive rows -> (B,) GRPO advantages (0 for constant groups)."""
    r = rewards.view(-1, group_size)
    centred = r - r.mean(1, keepdim=True)
    std = r.std(1, keepdim=True)
    return (centred / (std + eps)).reshape(-1)


def _merge(acc: dict[str, list[float]], metrics: dict[str, Any]) -> None:
    for k, v in metrics.items():
        try:
            acc.setdefault(k, []).append(float(v))
        except (TypeError, ValueError):
            continue


@dataclass
class Profile:
    """Where an iteration's time goes (seconds) and how many tokens each phase processed."""

    sample_s: float = 0.0
    score_s: float = 0.0
    update_s: float = 0.0
    sample_tokens: int = 0  # generated tokens (prompt prefill not counted)
    update_tokens: int = 0  # response tokens through forward + backward (per epoch)
    extra: dict[str, float] = field(default_factory=dict)


class Trainer:
    """Owns the policy, the optimiser and the seeded RNGs of one cell."""

    def __init__(
        self,
        policy: Policy,
        domain: Domain,
        settings: LocalSettings,
        loss_fn: LossFn,
        seed: int,
        loss_agg_mode: str = LOSS_AGG_MODE,
    ) -> None:
        self.policy = policy
        self.domain = domain
        self.s = settings
        self.loss_fn = loss_fn
        self.agg = loss_agg_mode
        torch.manual_seed(seed)
        self.prompt_rng = train_rng(seed)
        self.sample_gen = torch.Generator().manual_seed(10_000 + seed)
        self.shuffle_gen = torch.Generator().manual_seed(20_000 + seed)
        # torch.optim.AdamW without torch._dynamo's imports; fused: one kernel for every
        # parameter, 3x faster than the per-tensor loop at this size (the warm start keeps the
        # loop: its recipe, and so the shipped bases, stay as they are)
        self.opt = AdamW(
            policy.parameters(), lr=settings.lr, weight_decay=settings.weight_decay, fused=True
        )
        self.profile = Profile()

    def rollout(self) -> tuple[Rollout, torch.Tensor]:
        s = self.s
        probs = self.domain.sample_train(self.prompt_rng, s.prompts_per_step)
        t0 = time.perf_counter()
        ro = sample(
            self.policy,
            [p.prompt for p in probs],
            s.group_size,
            self.domain.max_new_tokens,
            self.sample_gen,
            s.temperature,
        )
        t1 = time.perf_counter()
        ok = completed(ro).tolist()
        rewards = torch.tensor(
            [
                self.domain.score(probs[i // s.group_size], t) if ok[i] else 0.0
                for i, t in enumerate(ro.texts)
            ]
        )
        self.profile.sample_s += t1 - t0
        self.profile.score_s += time.perf_counter() - t1
        self.profile.sample_tokens += ro.n_tokens
        return ro, rewards

    def update(self, ro: Rollout, adv: torch.Tensor) -> dict[str, float]:
        """The minibatch updates of one iteration -> loss diagnostics averaged over updates."""
        s = self.s
        t0 = time.perf_counter()
        b = adv.shape[0]
        adv_tok = adv[:, None].expand_as(ro.resp_mask).contiguous()
        acc: dict[str, list[float]] = {}
        self.policy.train()
        for _ in range(s.ppo_epochs):
            order = torch.randperm(b, generator=self.shuffle_gen)
            for idx in order.chunk(s.minibatches):
                mask = ro.resp_mask[idx]
                logp, _ = response_log_probs(
                    self.policy,
                    ro.prompt_ids[idx],
                    ro.prompt_valid[idx],
                    ro.resp_ids[idx],
                    mask,
                    entropy=False,  # unused by the loss: forward work saved
                )
                loss, metrics = self.loss_fn(
                    ro.old_log_prob[idx], logp, adv_tok[idx], mask, loss_agg_mode=self.agg
                )
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                if s.grad_clip is not None:
                    gn = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), s.grad_clip)
                    metrics = {**metrics, "grad_norm": float(gn)}
                self.opt.step()
                _merge(acc, {**metrics, "policy_loss": float(loss.detach())})
            self.profile.update_tokens += ro.n_tokens
        self.profile.update_s += time.perf_counter() - t0
        return reduce_step(acc)

    def step(self) -> dict[str, float]:
        """One iteration; returns the step's metrics under the loss's own keys plus
        ``score``, ``entropy``, ``response_length`` and ``constant_group_frac``."""
        ro, rewards = self.rollout()
        adv = group_advantages(rewards, self.s.group_size)
        out = self.update(ro, adv)
        mask = ro.resp_mask
        groups = rewards.view(-1, self.s.group_size)
        out.update(
            score=float(rewards.mean()),
            entropy=float((ro.entropy * mask).sum() / mask.sum()),
            response_length=float(mask.sum(1).mean()),
            constant_group_frac=float((groups.std(1) == 0).float().mean()),
        )
        return out
