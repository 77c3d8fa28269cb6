"""The ``code`` domain: program-by-example in a tiny list DSL, scored by execution.

A program is a left-to-right pipeline of ops on a list of digits:

========  =================================  ========  ==============================
``r``     reverse                            ``s``     sort ascending
``e``     keep even digits                   ``o``     keep odd digits
``a<k>``  add k to every digit (mod 10)      ``t<k>``  take the first k (k = 1..3)
``d<k>``  drop the first k (k = 1..3)
========  =================================  ========  ==============================

A prompt shows two input>output examples, e.g. ``31425>135;90817>179:``; the policy answers
with a program (``os``). The reward is 1 iff the answer parses and reproduces the target's output
on the shown inputs *and* on four hidden inputs (derived from the prompt), so any equivalent
program scores. Benchmarks (graded): ``dsl-map`` (one ``a<k>``), ``dsl-list`` (one structural op),
``dsl-pair`` (two ops), ``dsl-triple`` (three ops); each space is (program) x (10^5)^3 inputs.
"""

from __future__ import annotations

import hashlib
import random

from gppo.testbed.tasks import Domain, Family, Problem, register_domain

LIST_LEN = 5
N_SHOWN = 2
N_HIDDEN = 4
_STRUCT = ("r", "s", "e", "o", "t1", "t2", "t3", "d1", "d2", "d3")
_MAPS = tuple(f"a{k}" for k in range(1, 10))
OPS: tuple[str, ...] = _STRUCT + _MAPS


def parse(program: str) -> list[str] | None:
    """Split a program into ops, or ``None`` if it is not a valid program (empty is invalid)."""
    ops: list[str] = []
    i = 0
    while i < len(program):
        c = program[i]
        if c in "rseo":
            ops.append(c)
            i += 1
        elif c in "atd" and i + 1 < len(program) and program[i + 1].isdigit():
            k = int(program[i + 1])
            if (c == "a" and 1 <= k <= 9) or (c in "td" and 1 <= k <= 3):
                ops.append(program[i : i + 2])
                i += 2
            else:
                return None
        else:
            return None
    return ops or None


def run(ops: list[str], xs: list[int]) -> list[int]:
    """Execute parsed ``ops`` on ``xs``."""
    for op in ops:
        c = op[0]
        if c == "r":
            xs = xs[::-1]
        elif c == "s":
            xs = sorted(xs)
        elif c == "e":
            xs = [x for x in xs if x % 2 == 0]
        elif c == "o":
            xs = [x for x in xs if x % 2 == 1]
        elif c == "a":
            xs = [(x + int(op[1])) % 10 for x in xs]
        elif c == "t":
            xs = xs[: int(op[1])]
        elif c == "d":
            xs = xs[int(op[1]) :]
    return xs


def _fmt(xs: list[int]) -> str:
    return "".join(map(str, xs))


def _hidden_inputs(prompt: str) -> list[list[int]]:
    rng = random.Random(hashlib.sha256(prompt.encode()).hexdigest())
    return [[rng.randrange(10) for _ in range(LIST_LEN)] for _ in range(N_HIDDEN)]


def _make(rng: random.Random, ops: list[str], family: str) -> Problem:
    inputs = [[rng.randrange(10) for _ in range(LIST_LEN)] for _ in range(N_SHOWN)]
    prompt = ";".join(f"{_fmt(x)}>{_fmt(run(ops, x))}" for x in inputs) + ":"
    tests = inputs + _hidden_inputs(prompt)
    expected = [run(ops, x) for x in tests]
    return Problem(prompt=prompt, answer="".join(ops), family=family, data=(tests, expected))


def _dsl_map(rng: random.Random) -> Problem:
    return _make(rng, [rng.choice(_MAPS)], "dsl-map")


def _dsl_list(rng: random.Random) -> Problem:
    return _make(rng, [rng.choice(_STRUCT)], "dsl-list")


def _dsl_pair(rng: random.Random) -> Problem:
    return _make(rng, [rng.choice(OPS) for _ in range(2)], "dsl-pair")


def _dsl_triple(rng: random.Random) -> Problem:
    return _make(rng, [rng.choice(OPS) for _ in range(3)], "dsl-triple")


def score(problem: Problem, completion: str) -> float:
    """1.0 iff the completion parses and matches the target on shown and hidden inputs."""
    ops = parse(completion)
    if ops is None:
        return 0.0
    tests, expected = problem.data
    return 1.0 if all(run(ops, x) == y for x, y in zip(tests, expected, strict=False)) else 0.0


def corrupt(problem: Problem, rng: random.Random) -> str:
    """The reference program with one op replaced by a different op."""
    ops = parse(problem.answer) or []
    i = rng.randrange(len(ops))
    ops[i] = rng.choice([o for o in OPS if o != ops[i]])
    return "".join(ops)


@register_domain("code")
def code_domain() -> Domain:
    return Domain(
        name="code",
        families=(
            Family("dsl-map", _dsl_map, 1.0),
            Family("dsl-list", _dsl_list, 1.0),
            Family("dsl-pair", _dsl_pair, 1.0),
            Family("dsl-triple", _dsl_triple, 1.0),
        ),
        max_new_tokens=7,
        score_fn=score,
        corrupt_fn=corrupt,
        # program induction rises slowly (about 1 point per 300 warm-start steps at 10 %)
        warmstart_target=0.10,
    )
