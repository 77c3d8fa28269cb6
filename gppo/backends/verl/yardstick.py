"""One yardstick for every trainer: a verl testbed cell scored by the testbed's own evaluator.

A ``verl.testbed: true`` cell trains the testbed's exported base (:mod:`gppo.backends.verl.testbed`).
Its scores are the testbed's, not verl's: the base model (step 0) and the final policy (verl's last
``huggingface`` checkpoint, imported back into a testbed ``Policy``) each get avg@k on the domain's
benchmarks from :func:`gppo.backends.local.evaluate.evaluate` with the evaluation seed of a
``backend: local`` cell, logged under the same names (``eval/<benchmark>/avg_at_k``,
``eval/avg_at_k``, ``eval_base/<benchmark>/avg_at_k``). Table 1 then puts both trainers' rows side
by side, and the base row is the shipped record. verl's own validation (vLLM samples, the same
reward) stays in the run as ``verl_val/<benchmark>/mean_at_k`` (:mod:`.metrics_map`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def final_hf_dir(checkpoint_dir: str | Path, step: int) -> Path:
    """verl's Hugging Face export of the actor at ``step`` (``save_contents`` with ``hf_model``)."""
    path = Path(checkpoint_dir) / f"global_step_{step}" / "actor" / "huggingface"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no Hugging Face checkpoint of step {step} at {path} (verl saves it at the last step "
            "when checkpoint.save_contents has hf_model)"
        )
    return path


def score_model_dir(
    model_dir: str | Path,
    domain: str,
    benchmarks: Sequence[str],
    k: int,
    seed: int,
    temperature: float = 1.0,
) -> dict[str, float]:
    """``{benchmark: avg@k}`` of a GPT-2 directory, by the testbed's own evaluator at
    ``temperature`` (one thread, as a testbed cell: the same float reduction order, so the base
    scores its shipped record at temperature 1)."""
    import torch

    from gppo.backends.local.evaluate import evaluate
    from gppo.backends.local.hf_export import import_policy
    from gppo.backends.local.tasks import get_domain

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = import_policy(model_dir)
        return evaluate(
            policy, get_domain(domain), list(benchmarks), k, seed, temperature=temperature
        )
    finally:
        torch.set_num_threads(threads)
