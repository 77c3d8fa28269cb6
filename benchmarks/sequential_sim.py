"""Simulated sweeps under the adaptive-seeds rule (:mod:`gppo.stats.sequential`) and Table 1's
fixed test, vectorised over sweeps: a test and benchmark tool, not part of the installed package
(``benchmarks/error_rate.py`` and ``benchmarks/sim_adaptive_seeds.py`` print its tables;
``tests/stats/test_sequential.py`` checks the A/A error with a few hundred sweeps).

A simulated table has K rows and the reference; row k's per-seed scores are ``effect_k + e_k``
and the reference's ``e_0``, each group's noise drawn by its own ``Noise(rng, shape)`` (issue 58:
a noisier reference, one noisy row, heavy tails, skew). Every cell's ``max`` seeds are drawn up
front (shape ``(S, K, max)``, ``(S, max)``); the adaptive sweep uses the first n of them, the
fixed sweeps the first ``n`` for each ``n`` asked, so every sweep sees the same runs.

:data:`SCENARIOS` are the named variance cases of issue 58 (:func:`scenario`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from gppo.stats.sequential import CONTINUE, EQUIVALENT, SEPARATED, Design, decide_batch

Noise = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]
TESTS = ("welch", "pooled")
CORRECTIONS = ("holm", "bh")


def normal_noise(sd: float) -> Noise:
    """Normal seed noise with standard deviation ``sd`` points."""
    return lambda rng, shape: rng.normal(0.0, sd, shape)


def t3_noise(sd: float) -> Noise:
    """Heavy tails: Student t with 3 df scaled to standard deviation ``sd`` (its variance is 3)."""
    return lambda rng, shape: rng.standard_t(3, shape) * (sd / np.sqrt(3.0))


def lognormal_noise(sd: float, sigma: float = 1.0) -> Noise:
    """Skew: a lognormal (log-sd ``sigma``) centred on its mean and scaled to sd ``sd`` (right
    tail: a seed that sometimes takes off)."""
    mean = np.exp(sigma**2 / 2)
    scale = sd / np.sqrt((np.exp(sigma**2) - 1) * np.exp(sigma**2))
    return lambda rng, shape: (rng.lognormal(0.0, sigma, shape) - mean) * scale


def resampled_noise(values: Sequence[float]) -> Noise:
    """Seed noise drawn with replacement from recorded per-seed scores, centred on their mean."""
    arr = np.asarray(values, float)
    arr = arr - arr.mean()
    return lambda rng, shape: rng.choice(arr, size=shape, replace=True)


@dataclass(frozen=True)
class Scenario:
    """A named case: the rows' true Δs (``effects``, K), the reference's noise and each row's
    (``rows``: one for all or K), and a line saying what it is."""

    name: str
    effects: tuple[float, ...]
    reference: Noise
    rows: Noise | tuple[Noise, ...]
    text: str = ""


def _sd2(k: int, sd: float = 2.0) -> tuple[Noise, ...]:
    return tuple(normal_noise(sd) for _ in range(k))


def scenario(name: str) -> Scenario:
    """The named variance cases of issue 58 (17 rows unless named; every true Δ 0 except in
    ``partial nulls``, where 3 rows differ by -4, -6 and +5 points)."""
    n2 = normal_noise(2.0)
    null17 = (0.0,) * 17
    cases = {
        "every cell sd 2": Scenario(name, null17, n2, n2),
        "reference sd 3, rows 2": Scenario(name, null17, normal_noise(3.0), n2),
        "reference sd 4, rows 2": Scenario(name, null17, normal_noise(4.0), n2),
        "one row sd 6, rest 2": Scenario(name, null17, n2, (normal_noise(6.0), *_sd2(16))),
        "three rows sd 4, rest 2": Scenario(name, null17, n2, (*_sd2(3, 4.0), *_sd2(14))),
        "lognormal, sd 2": Scenario(name, null17, lognormal_noise(2.0), lognormal_noise(2.0)),
        "t3, sd 2": Scenario(name, null17, t3_noise(2.0), t3_noise(2.0)),
        "partial nulls, sd 2": Scenario(name, (-4.0, -6.0, 5.0, *(0.0,) * 14), n2, n2),
        "1 row, sd 2": Scenario(name, (0.0,), n2, n2),
        "3 rows, sd 2": Scenario(name, (0.0,) * 3, n2, n2),
        "30 rows, sd 2": Scenario(name, (0.0,) * 30, n2, n2),
    }
    return cases[name]


SCENARIOS = (
    "every cell sd 2",
    "reference sd 3, rows 2",
    "reference sd 4, rows 2",
    "one row sd 6, rest 2",
    "three rows sd 4, rest 2",
    "lognormal, sd 2",
    "t3, sd 2",
    "partial nulls, sd 2",
    "1 row, sd 2",
    "3 rows, sd 2",
    "30 rows, sd 2",
)


@dataclass(frozen=True)
class Sweeps:
    """S simulated sweeps: ``status`` (S, K) the adaptive rule's final codes, ``n`` (S, K) seeds
    per row, ``m`` (S,) the reference's, ``runs`` (S,) runs used (the reference and every row
    not run on its runs); ``fixed[(test, correction, n)]`` (S, K): the rows a fixed sweep at n
    seeds separates (:data:`TESTS` x :data:`CORRECTIONS`); ``fixed_holm``/``fixed_bh``: those
    at ``max`` with the design's test; ``fixed_runs`` the runs of the fixed sweep at max."""

    status: np.ndarray
    n: np.ndarray
    m: np.ndarray
    runs: np.ndarray
    fixed_holm: np.ndarray
    fixed_bh: np.ndarray
    fixed_runs: int
    fixed: dict[tuple[str, str, int], np.ndarray] = field(default_factory=dict)


def _sums(x: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and within sum of squares of the first ``n`` seeds (last axis of ``x``)."""
    cs, cs2 = np.cumsum(x, axis=-1), np.cumsum(x**2, axis=-1)
    idx = (n - 1)[..., None]
    s1 = np.take_along_axis(cs, idx, -1)[..., 0]
    s2 = np.take_along_axis(cs2, idx, -1)[..., 0]
    mean = s1 / n
    return mean, np.maximum(s2 - n * mean**2, 0.0)


def _stepped(p: np.ndarray, alpha: float, family: int, method: str, decided: int) -> np.ndarray:
    """Rows (S, K) rejected by Holm or BH over a family of ``family`` p-values, of which
    ``decided`` more (outside ``p``) have p = 0."""
    K = p.shape[1]
    order = np.argsort(p, axis=1)
    ps = np.take_along_axis(p, order, 1)
    j = np.arange(K)[None, :] + decided  # rank among the family, 0-based
    if method == "holm":
        # ranks past the family (rows outside it, e.g. on the reference's runs, p = 1): α
        keep = np.cumprod(ps <= alpha / np.maximum(family - j, 1), axis=1).astype(bool)
    else:  # BH: the largest rank whose p is under its line, and every rank below it
        under = ps <= alpha * (j + 1) / family
        last = np.where(under.any(axis=1), K - 1 - np.argmax(under[:, ::-1], axis=1), -1)
        keep = np.arange(K)[None, :] <= last[:, None]
    out = np.zeros_like(keep)
    np.put_along_axis(out, order, keep, 1)
    return out


def fixed_pvalues(
    x: np.ndarray, y: np.ndarray, n: int, test: str, same: np.ndarray | None = None
) -> np.ndarray:
    """Two-sided p-values (S, K) of Table 1's fixed test at the first ``n`` seeds of every cell:
    ``welch`` (each side's own variance, Welch-Satterthwaite df) or ``pooled`` (the within-cell
    variance pooled over the rows not in ``same`` and the reference); 1 where no variance."""
    S, K, _ = x.shape
    same = np.zeros(K, bool) if same is None else same
    xm, xss = _sums(x, np.full((S, K), n))
    ym, yss = _sums(y, np.full(S, n))
    diff = xm - ym[:, None]
    if test == "pooled":
        df = np.full((S, K), (n - 1) * ((~same).sum() + 1), float)
        s2 = (xss[:, ~same].sum(1) + yss) / df[:, 0]
        se = np.sqrt(s2[:, None] * 2 / n)
    else:
        a, b = xss / (n - 1) / n, (yss / (n - 1) / n)[:, None]
        se = np.sqrt(a + b)
        with np.errstate(divide="ignore", invalid="ignore"):
            df = (a + b) ** 2 / ((a**2 + b**2) / (n - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * stats.t.sf(np.abs(diff) / se, df)
    p = np.where(np.isfinite(p), p, 1.0)
    return np.where(same[None, :], 1.0, p)


def _noises(noise: Noise | Sequence[Noise], k: int) -> list[Noise]:
    return list(noise) if isinstance(noise, Sequence) else [noise] * k


def simulate(
    effects: Sequence[float],
    design: Design,
    sweeps: int,
    rng: np.random.Generator,
    noise: Noise | Sequence[Noise],
    same_runs: Sequence[bool] | None = None,
    separated_outside: int = 0,
    *,
    ref_noise: Noise | None = None,
    fixed_at: Sequence[int] = (),
    adaptive: bool = True,
) -> Sweeps:
    """Run ``sweeps`` tables with true Δs ``effects`` (shape ``(K,)``) under ``design`` and the
    fixed sweep at ``design.max_seeds`` (and at each of ``fixed_at`` seeds, every test and
    correction). ``noise``: the rows' seed noise, one for all or one per row; ``ref_noise``: the
    reference's (default: the first row's). ``same_runs`` (K,): rows run on the reference's runs
    (their scores are the reference's; no runs of their own). ``separated_outside``: rows of the
    family decided outside the rule (the base model's), counted separated from the start.
    ``adaptive`` False: the fixed sweeps only (``status`` all continue, ``n`` and ``m`` max).
    """
    eff = np.asarray(effects, float)
    K, S = eff.size, sweeps
    top = max(design.max_seeds, *fixed_at) if fixed_at else design.max_seeds
    same = np.zeros(K, bool) if same_runs is None else np.asarray(same_runs, bool)
    family = design.rows or K + separated_outside
    rows = _noises(noise, K)
    y = (ref_noise or rows[0])(rng, (S, top))
    x = np.stack([eff[k] + rows[k](rng, (S, top)) for k in range(K)], axis=1)
    x[:, same, :] = y[:, None, :]
    n = np.full((S, K), design.min_seeds)
    m = np.full(S, design.min_seeds)
    status = np.where(np.broadcast_to(same, (S, K)), EQUIVALENT, CONTINUE)
    # rows decided outside sit in the Holm count as separated ones: a column of zeros of Δ
    extra = np.full((S, separated_outside), SEPARATED)
    pad = np.zeros((S, separated_outside))
    for target in (*design.looks[1:], None) if adaptive else ():
        xm, xss = _sums(x, n)
        ym, yss = _sums(y, m)
        delta = np.hstack([xm - ym[:, None], pad])
        counts = np.hstack([n, np.full((S, separated_outside), design.min_seeds)])
        codes = np.hstack([status, extra])
        if design.test == "welch":
            own = np.hstack([xss / (n - 1), np.ones((S, separated_outside))])
            out = decide_batch(
                delta, counts, m, own, None, codes, design, family, ref_s2=yss / (m - 1)
            )
        else:
            df = (n[:, ~same] - 1).sum(1) + m - 1
            s2 = (xss[:, ~same].sum(1) + yss) / df
            groups = int((~same).sum()) + 1
            out = decide_batch(delta, counts, m, s2, df, codes, design, family, groups)
        status = out.status[:, :K]
        going = status == CONTINUE
        if target is None or not going.any():
            break
        n = np.where(going, target, n)
        m = np.where(going.any(axis=1), target, m)
    if not adaptive:
        n, m = np.full((S, K), design.max_seeds), np.full(S, design.max_seeds)
    runs = m + np.where(same[None, :], 0, n).sum(1)
    fixed: dict[tuple[str, str, int], np.ndarray] = {}
    for seeds in dict.fromkeys([*fixed_at, design.max_seeds]):
        for test in TESTS:
            p = fixed_pvalues(x, y, seeds, test, same)
            for corr in CORRECTIONS:
                fixed[(test, corr, seeds)] = _stepped(
                    p, design.alpha, family, corr, separated_outside
                )
    top_runs = int(design.max_seeds * ((~same).sum() + 1))
    holm = fixed[(design.test, "holm", design.max_seeds)]
    bh = fixed[(design.test, "bh", design.max_seeds)]
    return Sweeps(status, n, m, runs, holm, bh, top_runs, fixed)
