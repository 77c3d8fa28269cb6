"""avg@k: k samples per benchmark prompt at temperature 1 with a fixed evaluation seed.

avg@k of a benchmark = mean over its prompts of the mean 0/1 reward of the k samples; the domain
score is the unweighted mean over benchmarks. Same policy + same seed => same numbers.
"""

from __future__ import annotations

import torch

from gppo.backends.local.policy import Policy
from gppo.backends.local.rollout import completed, sample
from gppo.backends.local.tasks import Domain


def evaluate(
    policy: Policy,
    domain: Domain,
    benchmarks: list[str] | tuple[str, ...],
    k: int = 8,
    seed: int = 1234,
    max_prompts: int | None = None,
    temperature: float = 1.0,
    chunk: int = 1024,
) -> dict[str, float]:
    """``{benchmark: avg@k}`` (one sampling pass per chunk of prompts; seeded generator)."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, float] = {}
    per_chunk = max(1, chunk // k)
    for name in benchmarks:
        probs = domain.benchmark(name)[:max_prompts]
        total = 0.0
        for i in range(0, len(probs), per_chunk):
            part = probs[i : i + per_chunk]
            ro = sample(
                policy, [p.prompt for p in part], k, domain.max_new_tokens, gen, temperature
            )
            ok = completed(ro).tolist()
            for j, text in enumerate(ro.texts):
                if ok[j]:
                    total += domain.score(part[j // k], text)
        out[name] = total / (len(probs) * k)
    return out
