"""The reward of a prepared row by its ``data_source``: verl calls it for every rollout, TRL's
``testbed: false`` route for every completion (a shared backend module: no backend owns it).

verl groups validation metrics by ``data_source`` (``val-core/<data_source>/acc/mean@8``), so each
benchmark keeps its own name (``aime24`` ... ``smt25``, ``codeforces`` ... ``apps``). verl's
``default_compute_score`` picks its scorer by name too, but has no name for BRUMO25 or SMT25 and
gives code only partial credit, so this module (loaded by verl as
``reward.custom_reward_function.path=pkg://gppo.backends.rewards``) maps each name onto the
verl scorer to use and returns verl's dict form ``{"score", "acc"}``:

* math: verl's ``math_dapo`` scorer (DAPO's answer matching; score ±1, acc 0/1);
* code: verl's code scorer (``prime_code``, or sandbox fusion when configured); the reward and
  ``acc`` are 1 only when every test case passes (verifiable 0/1 reward);
* ``smoke`` (the smoke assets, :mod:`gppo.backends.verl.smoke`): :func:`smoke_score`;
* the CPU testbed's tasks (``testbed: true``, :mod:`gppo.testbed.hf_assets`): the training
  source ``testbed-math`` and the four math benchmarks, each its own ``data_source``, scored by the
  testbed's own scorer (:func:`gppo.testbed.reward.testbed_score`; exact 0/1: ``score`` = ``acc``).

verl's scorers (math, code) are imported from the ``verl`` package when a row needs them, so a
trainer without verl installed scores the testbed's and the smoke rows only.
"""

from __future__ import annotations

from typing import Any

#: Our data_source name -> the verl data_source whose scorer applies.
SCORER_OF: dict[str, str] = {
    # math
    "dapo_math_17k": "math_dapo",
    "aime24": "math_dapo",
    "aime25": "math_dapo",
    "brumo25": "math_dapo",
    "smt25": "math_dapo",
    # code
    "eurus_code_25k": "codecontests",
    "codeforces": "codeforces",
    "codecontests": "codecontests",
    "taco": "taco",
    "apps": "apps",
    # smoke runs (verl.smoke_assets): scored here, not by verl
    "smoke": "smoke",
    # the CPU testbed's math tasks (verl.testbed: true): the testbed's own scorer
    "testbed-math": "testbed-math",
    "add-small": "testbed-math",
    "add": "testbed-math",
    "sub": "testbed-math",
    "add3": "testbed-math",
}
#: Scorers that are the CPU testbed's own, by domain.
TESTBED_SCORERS: dict[str, str] = {"testbed-math": "math"}
CODE_SCORERS = frozenset({"codeforces", "codecontests", "taco", "apps"})


def smoke_score(solution_str: str, ground_truth: str) -> dict[str, float]:
    """The smoke reward: ``score`` is the share of the response's characters that are ASCII
    digits or spaces (in [0, 1]), so two samples of a random policy almost never score the same
    and a group's advantages are non-zero; ``acc`` is 1 when the response contains the answer."""
    text = solution_str or ""
    share = sum(ch.isdigit() or ch == " " for ch in text) / max(len(text), 1)
    return {"score": float(share), "acc": float(str(ground_truth) in text)}


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """Score one response; ``{"score": reward, "acc": 0 or 1}``."""
    try:
        scorer = SCORER_OF[data_source]
    except KeyError:
        raise ValueError(
            f"no scorer for data_source {data_source!r}; known: {', '.join(sorted(SCORER_OF))}"
        ) from None
    if scorer == "smoke":
        return smoke_score(solution_str, ground_truth)
    if scorer in TESTBED_SCORERS:
        from gppo.testbed.reward import testbed_score

        return testbed_score(TESTBED_SCORERS[scorer], solution_str, ground_truth)
    from verl.utils.reward_score import default_compute_score

    result = default_compute_score(scorer, solution_str, ground_truth, extra_info, **kwargs)
    score = float(result["score"]) if isinstance(result, dict) else float(result)
    if scorer in CODE_SCORERS:
        passed = float(score >= 1.0)  # continuous pass fraction -> all tests passed
        return {"score": passed, "acc": passed}
    acc = float(result["acc"]) if isinstance(result, dict) and "acc" in result else float(score > 0)
    return {"score": score, "acc": acc}
