"""One yardstick for every trainer: a Hugging Face model directory scored by the testbed's evaluator.

A ``testbed: true`` cell of verl or TRL trains the testbed's exported base
(:mod:`gppo.testbed.hf_assets`). Its scores are the testbed's, not the trainer's: the base model
(step 0) and the final policy (the trainer's last Hugging Face checkpoint, e.g. verl's
``global_step_<n>/actor/huggingface``, imported back into a testbed ``Policy``) each get avg@k on the domain's
benchmarks from :func:`gppo.testbed.evaluate.evaluate` with the evaluation seed of a
``backend: local`` cell, logged under the same names (``eval/<benchmark>/avg_at_k``,
``eval/avg_at_k``, ``eval_base/<benchmark>/avg_at_k``). Table 1 then puts both trainers' rows side
by side, and the base row is the shipped record. verl's own validation (vLLM samples, the same
reward) stays in a verl cell's run as ``verl_val/<benchmark>/mean_at_k``
(:mod:`gppo.backends.verl.metrics_map`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gppo.testbed.settings import EVAL_TEMPERATURE


def score_model_dir(
    model_dir: str | Path,
    domain: str,
    benchmarks: Sequence[str],
    k: int,
    seed: int,
    temperature: float = EVAL_TEMPERATURE,
) -> dict[str, float]:
    """``{benchmark: avg@k}`` of a GPT-2 directory, by the testbed's own evaluator at
    ``temperature`` (one thread, as a testbed cell: the same float reduction order, so the base
    scores its shipped record at temperature 1)."""
    import torch

    from gppo.testbed.evaluate import evaluate
    from gppo.testbed.hf_export import import_policy
    from gppo.testbed.tasks import get_domain

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = import_policy(model_dir)
        return evaluate(
            policy, get_domain(domain), list(benchmarks), k, seed, temperature=temperature
        )
    finally:
        torch.set_num_threads(threads)
