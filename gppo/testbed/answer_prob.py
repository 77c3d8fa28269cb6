"""How much probability a policy puts on the correct answers: the dose of the exploration family.

The paper's mechanism (its introduction and Appendix B) is about the behaviour probability μ of
the tokens RL must make more likely: single-sample MC bounds each token's ratio whatever its μ,
so a rare correct token (μ ≪ 1) is clipped after a small absolute change, while Atomic weights a
token's contribution by μ and leaves rare tokens room. On the testbed the tokens RL must amplify
are the correct answer's (its domains score by exact match, so the correct response is unique):
this module scores them teacher-forced, with no sampling and no randomness.

For ``problems`` (N prompts, answers of A_i tokens plus EOS), :func:`answer_probabilities`
returns per prompt ``p_answer`` = Π_t π(a_t | prompt, a_<t) (the probability that one sample at
temperature 1 is correct: avg@k's expectation) and per answer token μ_t = π(a_t | ...), EOS
included. :func:`answer_summary` reduces them to the record's numbers: the mean ``p_answer``,
the mean token μ, and the share of answer tokens with μ < 0.1 (the paper's rare tokens, the
first two buckets of :data:`gppo.objectives.buckets.MU_BUCKETS`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gppo.objectives.buckets import RARE_MU  # the first two μ buckets: mu_lt_0.01, mu_0.01_0.1
from gppo.testbed.policy import Policy, response_log_probs
from gppo.testbed.tasks import Domain, Problem
from gppo.testbed.vocab import EOS, PAD, encode, left_pad


def _right_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1.0
    return ids, mask


@torch.no_grad()
def answer_probabilities(
    policy: Policy, problems: Sequence[Problem]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(p_answer (N,), token_mu (N, A), mask (N, A))`` of the correct answers, teacher-forced.

    ``token_mu[i, t]`` is π(a_t | prompt_i, a_<t) for the answer's tokens and its EOS
    (``mask`` 1 there, 0 on padding); ``p_answer[i]`` their product. Deterministic: no sampling,
    the policy's training mode is left as it was."""
    prompt_ids, prompt_valid = left_pad([encode(p.prompt) for p in problems])
    resp_ids, resp_mask = _right_pad([[*encode(p.answer), EOS] for p in problems])
    was_training = policy.training
    policy.eval()
    try:
        logp, _ = response_log_probs(
            policy, prompt_ids, prompt_valid, resp_ids, resp_mask, entropy=False
        )
    finally:
        policy.train(was_training)
    logp = logp * resp_mask
    return logp.sum(1).exp(), logp.exp() * resp_mask, resp_mask


def answer_summary(policy: Policy, problems: Sequence[Problem]) -> dict[str, float]:
    """``{"p_answer", "answer_token_mu", "answer_rare_frac"}`` over ``problems`` (means; the last
    is the share of answer tokens with μ < :data:`RARE_MU`)."""
    p_answer, mu, mask = answer_probabilities(policy, problems)
    n_tokens = mask.sum()
    return {
        "p_answer": float(p_answer.mean()),
        "answer_token_mu": float(mu.sum() / n_tokens),
        "answer_rare_frac": float(((mu < RARE_MU) & (mask > 0)).sum() / n_tokens),
    }


def probe_problems(domain: Domain) -> list[Problem]:
    """The fixed probe set: every family's validation prompts (never trained on, never reported
    as a benchmark), in the domain's order."""
    return [p for name in domain.benchmark_names for p in domain.validation(name)]
