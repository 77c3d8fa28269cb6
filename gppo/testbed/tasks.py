"""Domains and benchmarks of the CPU testbed: a registry of task families with exact 0/1 rewards.

A :class:`Domain` owns a few *families* (one per benchmark, of graded difficulty). Each benchmark
is 64+ fixed prompts drawn from its family with a fixed RNG; a disjoint *validation* set per
family, drawn the same way with another RNG, is what the warm start stops on. Training prompts
(warm start and RL) are drawn from the same families with both rejected, so no evaluation or
validation prompt is ever trained on. Every family's prompt space is orders of magnitude larger
than what a cell sees.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gppo.registry import Registry

#: Bump when a generator changes: it is part of the warm-start cache key.
TASKS_VERSION = "v1"


@dataclass(frozen=True)
class Problem:
    """One prompt with its verifier data.

    Attributes:
        prompt: the text the policy is conditioned on.
        answer: a reference completion (reward 1).
        family: the benchmark family it was drawn from.
        data: what the scorer needs (the exact number, or the program and hidden test inputs).
    """

    prompt: str
    answer: str
    family: str
    data: Any = None


@dataclass(frozen=True)
class Family:
    """A generator of problems (``make(rng) -> Problem``) with a warm-start weight."""

    name: str
    make: Callable[[random.Random], Problem]
    warmstart_weight: float = 1.0


@dataclass
class Domain:
    """A task domain: families (= benchmarks), a scorer and an answer-noise model."""

    name: str
    families: tuple[Family, ...]
    max_new_tokens: int
    score_fn: Callable[[Problem, str], float]
    corrupt_fn: Callable[[Problem, random.Random], str]
    #: the warm start stops once its validation avg@8 (mean over families) reaches this
    warmstart_target: float = 0.25
    n_benchmark_prompts: int = 64
    n_validation_prompts: int = 64
    _bench: dict[str, list[Problem]] = field(default_factory=dict, repr=False)

    @property
    def benchmark_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.families)

    def family(self, name: str) -> Family:
        for f in self.families:
            if f.name == name:
                return f
        raise KeyError(
            f"unknown benchmark {name!r} for domain {self.name!r}; known: "
            + ", ".join(self.benchmark_names)
        )

    def _draw(self, name: str, stream: str, n: int, exclude: frozenset[str]) -> list[Problem]:
        """``n`` distinct problems of family ``name`` from the fixed RNG ``stream``."""
        fam = self.family(name)
        rng = random.Random(f"gppo-local/{self.name}/{name}/{stream}")
        seen: set[str] = set(exclude)
        probs: list[Problem] = []
        while len(probs) < n:
            p = fam.make(rng)
            if p.prompt not in seen:
                seen.add(p.prompt)
                probs.append(p)
        return probs

    def benchmark(self, name: str) -> list[Problem]:
        """The fixed, held-out prompts of benchmark ``name`` (distinct prompts, fixed RNG)."""
        if name not in self._bench:
            self._bench[name] = self._draw(
                name, TASKS_VERSION, self.n_benchmark_prompts, frozenset()
            )
        return self._bench[name]

    def validation(self, name: str) -> list[Problem]:
        """``n_validation_prompts`` fixed prompts of family ``name``, disjoint from its benchmark:
        the warm start's stopping set (never trained on, never reported)."""
        key = f"{name}/validation"
        if key not in self._bench:
            bench = frozenset(p.prompt for p in self.benchmark(name))
            self._bench[key] = self._draw(
                name, f"validation/{TASKS_VERSION}", self.n_validation_prompts, bench
            )
        return self._bench[key]

    @cached_property
    def heldout_prompts(self) -> frozenset[str]:
        """Every benchmark and validation prompt of the domain: never used for training."""
        return frozenset(
            p.prompt
            for b in self.benchmark_names
            for p in (*self.benchmark(b), *self.validation(b))
        )

    def sample_train(
        self, rng: random.Random, n: int, weights: Sequence[float] | None = None
    ) -> list[Problem]:
        """``n`` training problems (families mixed by ``weights``), benchmark prompts rejected."""
        fams = self.families
        w = list(weights) if weights is not None else [1.0] * len(fams)
        held = self.heldout_prompts
        out: list[Problem] = []
        while len(out) < n:
            fam = rng.choices(fams, weights=w)[0]
            p = fam.make(rng)
            if p.prompt not in held:
                out.append(p)
        return out

    def warmstart_weights(self) -> list[float]:
        return [f.warmstart_weight for f in self.families]

    def score(self, problem: Problem, completion: str) -> float:
        """Exact 0/1 reward of ``completion`` (the decoded response, EOS stripped)."""
        return float(self.score_fn(problem, completion))

    def corrupt(self, problem: Problem, rng: random.Random) -> str:
        """A plausible wrong answer (the warm start's label noise)."""
        return self.corrupt_fn(problem, rng)


#: the domains by name: zero-argument factories returning a :class:`Domain`. The built-in ones
#: are lazy (their module registers them on first use).
DOMAINS: Registry[Callable[[], Domain]] = Registry("domain")
DOMAINS.add_lazy("code", "gppo.testbed.tasks_code")
DOMAINS.add_lazy("math", "gppo.testbed.tasks_math")
_CACHE: dict[str, Domain] = {}


def register_domain(name: str) -> Callable[[Callable[[], Domain]], Callable[[], Domain]]:
    """Decorator registering a zero-argument :class:`Domain` factory under ``name`` (a taken name
    raises :class:`~gppo.errors.DuplicateNameError`)."""
    return DOMAINS.register(name)


def known_domains() -> list[str]:
    """Registered names (the built-in ``code`` and ``math`` first)."""
    return DOMAINS.names()


def get_domain(name: str) -> Domain:
    """The domain registered as ``name`` (built once); unknown names list the known ones
    (:class:`~gppo.errors.UnknownNameError`)."""
    if name not in _CACHE:
        _CACHE[name] = DOMAINS.get(name)()
    return _CACHE[name]


def train_rng(seed: int) -> random.Random:
    """The random stream a cell of ``seed`` draws its training prompts from
    (:meth:`Domain.sample_train`, ``prompts_per_step`` per step): the same for every trainer, so
    each trains on the testbed's prompts in the same order."""
    return random.Random(f"gppo-local/train/{seed}")
