"""The "base model": a short supervised warm start on a noisy answer distribution, cached.

Each training answer is replaced by a plausible wrong one (``Domain.corrupt``) with probability
``warmstart_noise``, so the warm-started policy puts real but partial mass on correct answers:
sampled at temperature 1 its avg@8 is low but clearly non-zero, and RL has something to sharpen.

The result is cached on disk under a hash of every setting it depends on. Concurrent starts are
safe: a ``FileLock`` lets one process build while the others wait, then all load the same file
(written atomically with ``os.replace``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock

from gppo.backends.local.policy import Policy, PolicyConfig
from gppo.backends.local.settings import LocalSettings
from gppo.backends.local.tasks import TASKS_VERSION, Domain, get_domain
from gppo.backends.local.vocab import EOS, PAD, VOCAB_SIZE, encode, left_pad

FORMAT_VERSION = "ws1"


def policy_config(settings: LocalSettings) -> PolicyConfig:
    d = get_domain(settings.domain)
    longest = max(len(p.prompt) for b in d.benchmark_names for p in d.benchmark(b))
    return PolicyConfig(
        d_model=settings.d_model,
        n_layers=settings.n_layers,
        n_heads=settings.n_heads,
        max_len=longest + d.max_new_tokens + 8,
    )


def warmstart_key(settings: LocalSettings) -> dict[str, Any]:
    """Everything the base model depends on (and nothing else)."""
    return {
        "format": FORMAT_VERSION,
        "tasks": TASKS_VERSION,
        "vocab": VOCAB_SIZE,
        "torch": torch.__version__.split("+")[0],
        "domain": settings.domain,
        "weights": get_domain(settings.domain).warmstart_weights(),
        "policy": policy_config(settings).to_dict(),
        **{k: v for k, v in settings.model_dump().items() if k.startswith("warmstart_")},
    }


def warmstart_hash(settings: LocalSettings) -> str:
    blob = json.dumps(warmstart_key(settings), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cache_dir(settings: LocalSettings) -> Path:
    if settings.cache_dir:
        return Path(settings.cache_dir)
    env = os.environ.get("GPPO_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "gppo-sweep" / "local"


def supervised_batch(
    domain: Domain, rng: random.Random, n: int, noise: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, valid, target) for next-token training; targets are PAD except on answer + EOS."""
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


def train_base(settings: LocalSettings, log_every: int = 0) -> Policy:
    """Run the warm start (deterministic given the settings)."""
    torch.manual_seed(settings.warmstart_seed)
    rng = random.Random(f"warmstart/{settings.warmstart_seed}")
    domain = get_domain(settings.domain)
    policy = Policy(policy_config(settings))
    opt = torch.optim.AdamW(policy.parameters(), lr=settings.warmstart_lr, weight_decay=0.01)
    n = settings.warmstart_steps
    warm = max(1, min(50, n // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.05, 1 - s / max(n, 1))
    )
    policy.train()
    t0 = time.perf_counter()
    for step in range(n):
        ids, valid, target = supervised_batch(
            domain, rng, settings.warmstart_batch, settings.warmstart_noise
        )
        logits, _ = policy(ids, valid)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), target.flatten(), ignore_index=PAD
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        sched.step()
        if log_every and (step % log_every == 0 or step == n - 1):
            print(f"warmstart step {step} loss {loss.item():.4f} {time.perf_counter() - t0:.1f}s")
    policy.eval()
    return policy


def load_base_model(settings: LocalSettings) -> tuple[Policy, bool, str]:
    """The cached base model: ``(policy, built_here, cache path)``; builds it at most once."""
    key = warmstart_hash(settings)
    root = cache_dir(settings)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"base-{settings.domain}-{key}.pt"
    built = False
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            policy = train_base(settings)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            torch.save(
                {"key": warmstart_key(settings), "state_dict": policy.state_dict()}, str(tmp)
            )
            os.replace(tmp, path)
            built = True
    blob = torch.load(str(path), map_location="cpu", weights_only=True)
    policy = Policy(policy_config(settings))
    policy.load_state_dict(blob["state_dict"])
    policy.eval()
    return policy, built, str(path)
