"""The ``math`` domain: multi-digit arithmetic with exact integer answers.

Four benchmarks of graded difficulty (prompt-space sizes in brackets):

* ``add-small``  ``a+b=`` with a < 1000, b < 100            [10^5]
* ``add``        ``a+b=`` with a, b < 1000                  [10^6]
* ``sub``        ``a-b=`` with b <= a < 1000                [5·10^5]
* ``add3``       ``a+b+c=`` with a, b, c < 100              [10^6]

Operands are zero-padded to the family's width and the answer is written least-significant
digit first (``123+045=`` -> ``861``): the standard layout that makes carries local for a small
causal model. The reward is 1 iff the response is exactly the reversed decimal spelling of the
value (no sign, no zeros beyond the value's own digits).
"""

from __future__ import annotations

import random

from gppo.testbed.tasks import Domain, Family, Problem, register_domain


def _p(prompt: str, value: int, family: str) -> Problem:
    return Problem(prompt=prompt, answer=str(value)[::-1], family=family, data=value)


def _add_small(rng: random.Random) -> Problem:
    a, b = rng.randrange(1000), rng.randrange(100)
    return _p(f"{a:03d}+{b:02d}=", a + b, "add-small")


def _add(rng: random.Random) -> Problem:
    a, b = rng.randrange(1000), rng.randrange(1000)
    return _p(f"{a:03d}+{b:03d}=", a + b, "add")


def _sub(rng: random.Random) -> Problem:
    a, b = rng.randrange(1000), rng.randrange(1000)
    a, b = max(a, b), min(a, b)
    return _p(f"{a:03d}-{b:03d}=", a - b, "sub")


def _add3(rng: random.Random) -> Problem:
    a, b, c = rng.randrange(100), rng.randrange(100), rng.randrange(100)
    return _p(f"{a:02d}+{b:02d}+{c:02d}=", a + b + c, "add3")


def score(problem: Problem, completion: str) -> float:
    """1.0 iff ``completion`` is exactly the value's decimal spelling, reversed."""
    return 1.0 if completion == problem.answer else 0.0


def corrupt(problem: Problem, rng: random.Random) -> str:
    """The answer with one digit replaced by a different digit (never the correct answer)."""
    digits = list(problem.answer)
    i = rng.randrange(len(digits))
    choices = [
        d for d in "0123456789" if d != digits[i] and not (i == len(digits) - 1 and d == "0")
    ]
    if not choices:  # single "0": any other digit
        choices = list("123456789")
    digits[i] = rng.choice(choices)
    return "".join(digits)


@register_domain("math")
def math_domain() -> Domain:
    return Domain(
        name="math",
        families=(
            Family("add-small", _add_small, 0.3),
            Family("add", _add, 1.0),
            Family("sub", _sub, 1.0),
            Family("add3", _add3, 1.5),
        ),
        max_new_tokens=5,
        score_fn=score,
        corrupt_fn=corrupt,
    )
