"""avg@k: k samples per benchmark prompt at temperature 1 with a fixed evaluation seed.

avg@k of a benchmark = mean over its prompts of the mean 0/1 reward of the k samples; the domain
score is the unweighted mean over benchmarks. Same policy + same seed => same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from gppo.cell import DEFAULT_EVAL_K
from gppo.testbed.policy import Policy
from gppo.testbed.rollout import completed, sample
from gppo.testbed.settings import EVAL_TEMPERATURE
from gppo.testbed.tasks import Domain, Problem


def avg_at_k(
    policy: Policy,
    domain: Domain,
    sets: Mapping[str, Sequence[Problem]],
    k: int = DEFAULT_EVAL_K,
    seed: int = 1234,
    temperature: float = EVAL_TEMPERATURE,
    chunk: int = 1024,
) -> dict[str, float]:
    """``{name: avg@k}`` of each named prompt set (one sampling pass per chunk of prompts;
    one seeded generator, consumed in the order of ``sets``)."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, float] = {}
    per_chunk = max(1, chunk // k)
    for name, probs in sets.items():
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


def evaluate(
    policy: Policy,
    domain: Domain,
    benchmarks: list[str] | tuple[str, ...],
    k: int = DEFAULT_EVAL_K,
    seed: int = 1234,
    max_prompts: int | None = None,
    temperature: float = EVAL_TEMPERATURE,
    chunk: int = 1024,
) -> dict[str, float]:
    """``{benchmark: avg@k}`` on the held-out benchmark prompts (the first ``max_prompts``)."""
    sets = {name: domain.benchmark(name)[:max_prompts] for name in benchmarks}
    return avg_at_k(policy, domain, sets, k, seed, temperature, chunk)
