"""The "base model": a supervised warm start on a noisy answer distribution, stopped on a target.

Each training answer is replaced by a plausible wrong one (``Domain.corrupt``) with probability
``warmstart_noise``, so the warm-started policy puts real but partial mass on correct answers:
sampled at temperature 1 its avg@8 is low but clearly non-zero, and RL has something to sharpen
(from a base trained on clean answers and stopped at the same accuracy, GRPO gains a quarter as
much: docs/studies/base-robustness.md).

**Why a target, not a step budget.** The arithmetic warm start crosses a late, abrupt transition
(a loss plateau, then families are learned one after another), and *when* it crosses depends on
the seed and on float rounding: the same fixed budget gave a 4 % base on one CPU and 28 % on
another. So the learning rate is constant after a short warm-up, and every
``warmstart_check_every`` steps the policy is scored (avg@8, temperature 1) on the domain's fixed
validation prompts (:meth:`Domain.validation`, disjoint from the benchmarks and never trained on);
the warm start stops at the first check whose domain mean reaches ``warmstart_target``. Where it
stops varies with the machine; what it stops *at* does not (docs/studies/base-robustness.md
measures the spread).

**Why restarts.** The time to the transition is heavy-tailed: of 18 math attempts (10 builds),
10 reached the target 1,150-6,850 steps after their start and 8 were still below half of it
after 4,000 (without restarts, some learned slowly for 6,000 steps and more). So an attempt that
has not reached half the target within ``warmstart_restart_after`` (4,000) steps starts over from fresh weights, with
the next attempt's seeds, up to ``warmstart_steps`` (30,000) in all: every one of 10 builds
(5 seeds x 1 and 2 threads) then reaches the target, their benchmark means within 4.7 points
(docs/studies/base-robustness.md). ``warmstart_fine_check_every`` (opt-in, off by default and
then out of the key) checks more often once a check has reached half the target.

The default base of each domain is shipped with the package (:mod:`.shipped`), so the quick start
builds nothing. Other settings build one, cached on disk under a hash of every setting it depends
on. Concurrent starts are safe: :func:`gppo.testbed.cache.build_once` lets one process build
while the others wait, then all load the same file (written atomically with ``os.replace``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gppo.testbed.cache import build_once, cache_root
from gppo.testbed.evaluate import avg_at_k
from gppo.testbed.no_dynamo import AdamW
from gppo.testbed.policy import Policy, PolicyConfig, fold_temperature
from gppo.testbed.settings import BaseModelSettings
from gppo.testbed.shipped import shipped_file
from gppo.testbed.tasks import TASKS_VERSION, Domain, get_domain
from gppo.testbed.vocab import EOS, PAD, VOCAB_SIZE, encode, left_pad

FORMAT_VERSION = "ws2"
#: the validation check: avg@k with this k and seed on ``Domain.validation`` prompts
CHECK_K = 8
CHECK_SEED = 4321
WARMUP_STEPS = 50
#: recipe settings that are off when None; off, they stay out of the key (the bases shipped
#: before they existed keep their keys)
OPT_IN = ("warmstart_fine_check_every", "warmstart_restart_after")


def policy_config(settings: BaseModelSettings) -> PolicyConfig:
    d = get_domain(settings.domain)
    longest = max(len(p.prompt) for b in d.benchmark_names for p in d.benchmark(b))
    return PolicyConfig(
        d_model=settings.d_model,
        n_layers=settings.n_layers,
        n_heads=settings.n_heads,
        max_len=longest + d.max_new_tokens + 8,
    )


def resolved_target(settings: BaseModelSettings) -> float:
    """``warmstart_target``, or the domain's default when it is None."""
    if settings.warmstart_target is not None:
        return settings.warmstart_target
    return get_domain(settings.domain).warmstart_target


def warmstart_key(settings: BaseModelSettings) -> dict[str, Any]:
    """Everything the base model's recipe depends on (and nothing else)."""
    ws = {
        k: v
        for k, v in settings.model_dump().items()
        if k.startswith("warmstart_") and not (k in OPT_IN and v is None)
    }
    ws["warmstart_target"] = resolved_target(settings)
    return {
        "format": FORMAT_VERSION,
        "tasks": TASKS_VERSION,
        "vocab": VOCAB_SIZE,
        "domain": settings.domain,
        "weights": get_domain(settings.domain).warmstart_weights(),
        "policy": policy_config(settings).to_dict(),
        **ws,
    }


def warmstart_hash(settings: BaseModelSettings) -> str:
    blob = json.dumps(warmstart_key(settings), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cache_dir(settings: BaseModelSettings) -> Path:
    """Where self-built bases (and the bases' step-0 evaluations) are cached: ``cache_dir``, else
    ``bases/`` under the cache root (:func:`gppo.testbed.cache.cache_root`)."""
    if settings.cache_dir:
        return Path(settings.cache_dir).expanduser()
    return cache_root() / "bases"


def supervised_batch(
    domain: Domain, rng: random.Random, n: int, noise: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, valid, target), each (B, T), for next-token training; targets are PAD except on
    answer + EOS."""
    probs = domain.sample_train(rng, n, domain.warmstart_weights())
    seqs, starts = [], []
    for p in probs:
        ans = domain.corrupt(p, rng) if rng.random() < noise else p.answer
        prompt = encode(p.prompt)
        seqs.append(prompt + encode(ans) + [EOS])
        starts.append(len(prompt))
    width = max(len(s) for s in seqs)
    # left-pad so every row's answer ends at the right edge
    ids, valid = left_pad(seqs)
    target = torch.full_like(ids, PAD)
    for row, (s, st) in enumerate(zip(seqs, starts, strict=False)):
        off = width - len(s)
        # target at position i is token i + 1; answer tokens are s[st:]
        for i in range(st - 1, len(s) - 1):
            target[row, off + i] = s[i + 1]
    return ids, valid, target


def validation_score(policy: Policy, domain: Domain) -> float:
    """avg@8 on the validation prompts, mean over the domain's families."""
    sets = {name: domain.validation(name) for name in domain.benchmark_names}
    scores = avg_at_k(policy, domain, sets, CHECK_K, CHECK_SEED)
    return sum(scores.values()) / len(scores)


@dataclass
class WarmstartRun:
    """How a warm start went: the steps it ran (all attempts), its last validation score,
    whether that reached the target, its wall time, its checks and its restarts."""

    steps: int = 0
    validation: float | None = None
    target: float = 0.0
    reached: bool = False
    seconds: float = 0.0
    checks: list[tuple[int, float]] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)  # the steps at which an attempt restarted


def _check_every(settings: BaseModelSettings, run: WarmstartRun) -> int:
    """The coarse check interval, or the fine one once a check has reached half the target (the
    last stretch to the target can take only a few dozen steps)."""
    fine = settings.warmstart_fine_check_every
    near = run.validation is not None and run.validation >= run.target / 2
    return fine if fine is not None and near else settings.warmstart_check_every


def _attempt_seeds(seed: int, attempt: int) -> tuple[int, str]:
    """(torch seed, batch-RNG seed) of an attempt: the warm-start seed itself for the first one,
    a hash of it and the attempt number for a restart."""
    if attempt == 0:
        return seed, f"warmstart/{seed}"
    tag = f"warmstart/{seed}/restart-{attempt}"
    return int(hashlib.sha256(tag.encode()).hexdigest()[:15], 16), tag


def _fresh_attempt(
    settings: BaseModelSettings, attempt: int
) -> tuple[Policy, AdamW, torch.optim.lr_scheduler.LambdaLR, random.Random]:
    """Fresh weights, optimiser, warm-up schedule and batch RNG for one attempt."""
    torch_seed, rng_seed = _attempt_seeds(settings.warmstart_seed, attempt)
    torch.manual_seed(torch_seed)
    rng = random.Random(rng_seed)
    policy = Policy(policy_config(settings))
    opt = AdamW(policy.parameters(), lr=settings.warmstart_lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP_STEPS))
    return policy, opt, sched, rng


def train_base(
    settings: BaseModelSettings, log: Callable[[str], None] | None = None
) -> tuple[Policy, WarmstartRun]:
    """Run the warm start (deterministic given the settings and the machine's float rounding):
    constant learning rate after ``WARMUP_STEPS``, stopped at the first validation check that
    reaches the target, or after ``warmstart_steps`` in all.

    With ``warmstart_restart_after`` set, an attempt whose checks have not reached half the
    target within that many steps starts over from fresh weights (the next attempt's seeds): the
    time to the transition is heavy-tailed (docs/studies/base-robustness.md), and restarting,
    as a SAT solver does, bounds it. A build that never restarts is the build without the rule (the shipped
    bases stopped at 1,750 and 900 steps, before it could act)."""
    domain = get_domain(settings.domain)
    noise = settings.warmstart_noise
    run = WarmstartRun(target=resolved_target(settings))
    policy, opt, sched, rng = _fresh_attempt(settings, 0)
    began, best = 0, 0.0  # the step the current attempt began after, its best check
    t0 = time.perf_counter()
    for step in range(1, settings.warmstart_steps + 1):
        policy.train()
        ids, valid, target = supervised_batch(domain, rng, settings.warmstart_batch, noise)
        logits, _ = policy(ids, valid)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), target.flatten(), ignore_index=PAD
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        sched.step()
        run.steps = step
        if step % _check_every(settings, run) == 0:
            policy.eval()
            run.validation = validation_score(policy, domain)
            run.checks.append((step, run.validation))
            best = max(best, run.validation)
            if log:
                log(
                    f"warmstart step {step} loss {loss.item():.4f} validation avg@{CHECK_K} "
                    f"{run.validation:.3f} (target {run.target}) {time.perf_counter() - t0:.0f}s"
                )
            if run.validation >= run.target:
                run.reached = True
                break
        restart_after = settings.warmstart_restart_after
        if restart_after and step - began == restart_after and best < run.target / 2:
            run.restarts.append(step)
            if log:
                log(
                    f"warmstart step {step}: best validation {best:.3f} after {restart_after} "
                    f"steps, below half the target: restart {len(run.restarts)} from fresh weights"
                )
            policy, opt, sched, rng = _fresh_attempt(settings, len(run.restarts))
            began, best, run.validation = step, 0.0, None
    policy.eval()
    run.seconds = time.perf_counter() - t0
    return policy, run


@dataclass
class BaseModel:
    """A loaded base model: the policy, where it came from (``shipped``: the package's own file;
    ``cached``: built earlier on this machine; ``built``: built by this call), its file, and the
    temperature folded into it as loaded (``base_temperature``; 1: the file as it is)."""

    policy: Policy
    source: str
    path: str
    temperature: float = 1.0

    @property
    def built(self) -> bool:
        return self.source == "built"


def load_policy(settings: BaseModelSettings, path: Path) -> Policy:
    """The policy stored at ``path`` (a float16 or float32 ``state_dict``), as float32, eval mode."""
    blob = torch.load(str(path), map_location="cpu", weights_only=True)
    policy = Policy(policy_config(settings))
    policy.load_state_dict({k: v.float() for k, v in blob["state_dict"].items()})
    policy.eval()
    return policy


def _build_note(settings: BaseModelSettings, key: str) -> str:
    return (
        f"building a base model for these settings (key {key}; the package ships the default "
        f"{settings.domain} base only): up to {settings.warmstart_steps} steps, stopping at "
        f"validation avg@{CHECK_K} {resolved_target(settings)}, typically 2-15 minutes on one "
        "core; a self-built base can differ from machine to machine (float rounding), the "
        "shipped one does not"
    )


def load_base_model(settings: BaseModelSettings, say: Callable[[str], None] = print) -> BaseModel:
    """The base model for ``settings``: the shipped file when its key matches, else the cached
    build, else built here (at most once across concurrent processes); with ``base_temperature``
    τ folded into its final layer (:func:`~gppo.testbed.policy.fold_temperature`): the file is the
    same at every τ."""
    base = _load_base_file(settings, say)
    base.temperature = settings.base_temperature
    fold_temperature(base.policy, base.temperature)
    return base


def _load_base_file(settings: BaseModelSettings, say: Callable[[str], None]) -> BaseModel:
    key = warmstart_hash(settings)
    shipped = shipped_file(settings.domain, key)
    if shipped is not None:
        return BaseModel(load_policy(settings, shipped), "shipped", str(shipped))
    root = cache_dir(settings)
    path = root / f"base-{settings.domain}-{key}.pt"
    built = []

    def build() -> None:
        say(_build_note(settings, key))
        policy, run = train_base(settings)
        say(
            f"base model built in {run.seconds:.0f}s: {run.steps} steps"
            + (f" ({len(run.restarts)} restarts)" if run.restarts else "")
            + ", validation "
            f"avg@{CHECK_K} {run.validation if run.validation is not None else 'n/a'}"
            + ("" if run.reached or run.validation is None else " (target not reached)")
        )
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save({"key": warmstart_key(settings), "state_dict": policy.state_dict()}, str(tmp))
        os.replace(tmp, path)  # the file is the build's "done": written last, atomically
        built.append(path)

    build_once(path, build)
    return BaseModel(load_policy(settings, path), "built" if built else "cached", str(path))
