"""The testbed's reward: exact 0/1 by its domain's own scorer, for trainers that hand over text.

A trainer that samples with its own engine (verl's vLLM, TRL's ``generate``) hands back a decoded
response and the row's ``ground_truth``; :func:`testbed_score` scores it as the testbed's own
loop does (:meth:`gppo.testbed.tasks.Domain.score`), in the ``{"score", "acc"}`` form verl's
reward functions return (``score`` = ``acc``).
"""

from __future__ import annotations

from gppo.testbed.tasks import Problem, get_domain


def testbed_score(domain: str, solution_str: str, ground_truth: str) -> dict[str, float]:
    """The testbed's exact 0/1 reward (its domain's own scorer) of one decoded response."""
    if domain != "math":
        raise ValueError(f"testbed rewards are built for math only, not {domain!r}")
    problem = Problem(prompt="", answer=str(ground_truth), family="", data=None)
    score = get_domain(domain).score(problem, solution_str or "")
    return {"score": score, "acc": score}
