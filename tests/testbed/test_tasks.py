"""Reward functions and task generators of the CPU testbed: exact answers, DSL execution, and
no leakage of benchmark prompts into training (warm start or RL)."""

from __future__ import annotations

import random

import pytest

from gppo.testbed import tasks_code as C
from gppo.testbed import tasks_math as TM
from gppo.testbed.tasks import get_domain, known_domains
from gppo.testbed.vocab import decode, encode
from gppo.testbed.warmstart import supervised_batch


def test_registry_lists_known_domains() -> None:
    assert known_domains() == ["code", "math"]
    with pytest.raises(KeyError, match="known: code, math"):
        get_domain("chess")
    with pytest.raises(KeyError, match="known: add-small, add, sub, add3"):
        get_domain("math").family("mul")


@pytest.mark.parametrize("domain", ["math", "code"])
def test_benchmarks_fixed_distinct_and_scored_by_reference(domain: str) -> None:
    d = get_domain(domain)
    assert len(d.benchmark_names) == 4
    for name in d.benchmark_names:
        probs = d.benchmark(name)
        assert len(probs) >= 64
        assert len({p.prompt for p in probs}) == len(probs)
        assert all(d.score(p, p.answer) == 1.0 for p in probs)
        rng = random.Random(0)
        # the math corruption is always wrong; a corrupted program may be equivalent by chance
        wrong = [d.score(p, d.corrupt(p, rng)) for p in probs]
        assert (sum(wrong) == 0) if domain == "math" else (sum(wrong) < len(probs) / 2)
        assert encode(probs[0].prompt)  # every character is in the vocabulary


@pytest.mark.slow
def test_benchmarks_are_deterministic_across_processes() -> None:
    import subprocess
    import sys

    code = (
        "from gppo.testbed.tasks import get_domain;"
        "print([p.prompt for p in get_domain('code').benchmark('dsl-pair')[:5]])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(
        [p.prompt for p in get_domain("code").benchmark("dsl-pair")[:5]]
    )


def test_math_reward_is_exact() -> None:
    p = TM._add(random.Random(3))
    a, b = (int(x) for x in p.prompt[:-1].split("+"))
    assert p.answer == str(a + b)[::-1]
    assert TM.score(p, p.answer) == 1.0
    for wrong in (p.answer + "0", p.answer[:-1], "", " " + p.answer, str(a + b)):
        if wrong != p.answer:
            assert TM.score(p, wrong) == 0.0
    s = TM._sub(random.Random(5))
    x, y = (int(v) for v in s.prompt[:-1].split("-"))
    assert x >= y and s.answer == str(x - y)[::-1]
    t = TM._add3(random.Random(7))
    assert t.answer == str(sum(int(v) for v in t.prompt[:-1].split("+")))[::-1]


def test_dsl_parse_and_run() -> None:
    assert C.parse("sa3r") == ["s", "a3", "r"]
    assert C.parse("") is None
    assert C.parse("a0") is None and C.parse("t4") is None and C.parse("x") is None
    assert C.parse("a") is None and C.parse("s r") is None
    xs = [3, 1, 4, 1, 5]
    assert C.run(["r"], xs) == [5, 1, 4, 1, 3]
    assert C.run(["s"], xs) == [1, 1, 3, 4, 5]
    assert C.run(["e"], xs) == [4]
    assert C.run(["o"], xs) == [3, 1, 1, 5]
    assert C.run(["a7"], xs) == [0, 8, 1, 8, 2]
    assert C.run(["t2"], xs) == [3, 1]
    assert C.run(["d3"], xs) == [1, 5]
    assert C.run(["s", "r", "t1"], xs) == [5]


def test_dsl_reward_executes_on_hidden_inputs() -> None:
    rng = random.Random(11)
    p = C._make(rng, ["s"], "dsl-list")
    tests, expected = p.data
    assert len(tests) == C.N_SHOWN + C.N_HIDDEN
    assert C.score(p, "s") == 1.0
    assert C.score(p, "rrs") == 1.0  # an equivalent program scores
    assert C.score(p, "r") == 0.0 or all(
        C.run(["r"], x) == y for x, y in zip(tests, expected, strict=False)
    )
    assert C.score(p, "garbage") == 0.0
    # a program that matches the shown examples only would fail on the hidden inputs
    shown = {C._fmt(x): C._fmt(C.run(["s"], x)) for x in tests[: C.N_SHOWN]}
    assert all(k + ">" + v in p.prompt for k, v in shown.items())
    assert tests[C.N_SHOWN :] == C._hidden_inputs(p.prompt)


@pytest.mark.parametrize("domain", ["math", "code"])
def test_no_leakage_between_training_and_benchmarks(domain: str) -> None:
    d = get_domain(domain)
    held = d.heldout_prompts
    bench = {p.prompt for b in d.benchmark_names for p in d.benchmark(b)}
    val = {p.prompt for b in d.benchmark_names for p in d.validation(b)}
    assert not bench & val  # the warm start stops on prompts that are never reported
    assert held == bench | val
    assert len(held) == sum(len(d.benchmark(b)) + len(d.validation(b)) for b in d.benchmark_names)
    rng = random.Random(0)
    train = d.sample_train(rng, 20_000)
    assert not held & {p.prompt for p in train}
    # the generators do hit benchmark prompts (so the rejection is doing work) on a small family
    fam = d.families[0]
    raw = {fam.make(random.Random(i)).prompt for i in range(2000)}
    assert len(raw) > 1900  # the prompt space is far larger than a cell can see
    # the warm start's supervised batches never contain a benchmark prompt either
    ids, valid, _target = supervised_batch(d, random.Random(1), 256, noise=0.5)
    texts = set()
    for row in range(ids.shape[0]):
        full = decode(ids[row][valid[row]])
        cut = full.index("=") + 1 if domain == "math" else full.index(":") + 1
        texts.add(full[:cut])
    assert not held & texts


def test_rejection_actually_removes_benchmark_prompts() -> None:
    # force a collision: a generator that only ever yields benchmark prompts plus one fresh one
    d = get_domain("math")
    bench = d.benchmark("add-small")
    assert all(p.prompt in d.heldout_prompts for p in bench)
    fresh = [p for p in d.sample_train(random.Random(2), 500) if p.family == "add-small"]
    assert fresh and all(p.prompt not in d.heldout_prompts for p in fresh)
