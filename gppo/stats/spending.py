"""Group-sequential boundaries from an alpha-spending function, for the adaptive-seeds rule
(:mod:`gppo.stats.sequential`).

A comparison is looked at after ``n_1 < n_2 < ... <= max`` seeds. Its information at a look is
``I = 1 / se²`` with ``se² = σ² (1/n + 1/m)`` (n seeds of the row, m of the reference), and its
information fraction ``t = I / I_max``, ``I_max`` the information at ``max`` seeds on both sides
(so ``t = n / max`` when both sides have n seeds). Under ``Δ = 0`` the standardised statistics
``Z_j = S_j / sqrt(I_j)`` of the looks are those of a Brownian motion, ``S_j = W(t_j)`` with
independent increments (Jennison & Turnbull, *Group Sequential Methods with Applications to
Clinical Trials*, 2000, §3.1 and ch. 19).

- :data:`SPENDING`, the spending functions ``α(t)``, two-sided, symmetric: ``power``, Kim &
  DeMets's (Biometrics 43, 1987) ``α t^4`` (:data:`RHO`), the default; ``obf``, Lan & DeMets's
  (Biometrika 70, 1983) O'Brien-Fleming type on each side, ``4 (1 - Φ(z_{1-α/4} / sqrt(t)))``
  (gsDesign's ``sfLDOF``). Both spend little at the first looks, so the last look's bound stays
  close to the fixed-n test's (at α = 0.05 with 7 looks at 2..8 seeds: 2.04 and 2.07 against
  1.96); ``power`` spends more at the first looks (by 3 of 8 seeds 0.0010 against 0.0005) and
  less at the late ones, where a row a few points off the reference is decided: on the quick
  start's effects it needs fewer runs at the same power (``benchmarks/sim_adaptive_seeds.py``);
- :func:`boundaries`: the two-sided bounds ``c_1..c_k`` with ``P_0(|Z_1| < c_1, ...,
  |Z_{j-1}| < c_{j-1}, |Z_j| >= c_j) = α(t_j) - α(t_{j-1})``, by the recursive numerical
  integration of Armitage, McPherson & Rowe (JRSS A 132, 1969) on a Simpson grid (ch. 19 of the
  book); a final look spends what is left of α whatever its fraction;
- :func:`nominal_levels`: the bounds as two-sided nominal p-values ``2 (1 - Φ(c_j))``, the form in
  which :mod:`gppo.stats.sequential` applies them to a t statistic (the "significance level
  approach" of Jennison & Turnbull §3.8 for an unknown variance);
- :func:`t_calibrated_alpha`: the smaller α to spend where the pooled variance has few degrees
  of freedom, so that those t tests hold α jointly (a seeded simulation of null paths).

Everything here is deterministic; the bounds and the calibration are cached on their arguments.
The bounds of Lan-DeMets's O'Brien-Fleming-type design (``kind="obf"``) with 5 equally spaced
looks at α = 0.05 are 4.877, 3.357, 2.680, 2.290, 2.031 (``tests/stats/test_sequential.py``
checks them).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, special, stats

#: Simpson grid points per look of the recursive integration (odd)
GRID = 201
_ROOT_2PI = math.sqrt(2 * math.pi)


#: the power family's exponent (Kim & DeMets: 1 is close to Pocock's bounds, 3 to O'Brien-Fleming's)
RHO = 4.0


def power_spent(alpha: float, t: float) -> float:
    """Two-sided α spent by information fraction ``t`` (0 < t <= 1), Kim-DeMets power family:
    ``α t^RHO``; ``α`` at ``t >= 1``."""
    return alpha if t >= 1 else alpha * t**RHO


def obf_spent(alpha: float, t: float) -> float:
    """Two-sided α spent by information fraction ``t`` (0 < t <= 1), Lan-DeMets O'Brien-Fleming
    type on each side: ``4 (1 - Φ(z_{1-α/4} / sqrt(t)))``; ``α`` at ``t >= 1``."""
    if t >= 1:
        return alpha
    return float(4 * stats.norm.sf(stats.norm.isf(alpha / 4) / math.sqrt(t)))


def _simpson(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Points (shape ``(GRID,)``) and Simpson weights over ``[lo, hi]``."""
    x = np.linspace(lo, hi, GRID)
    w = np.ones(GRID)
    w[1:-1:2], w[2:-1:2] = 4, 2
    return x, w * (hi - lo) / (3 * (GRID - 1))


SPENDING = {"power": power_spent, "obf": obf_spent}


@functools.lru_cache(maxsize=4096)
def boundaries(
    alpha: float, fractions: tuple[float, ...], final: bool = False, kind: str = "power"
) -> tuple[float, ...]:
    """Two-sided bounds ``c_1..c_k`` on ``|Z_j|`` for the looks at the increasing information
    fractions ``fractions`` (each in ``(0, 1]``), ``alpha`` spent by ``SPENDING[kind]``.

    ``final``: the last look is the design's last, and spends all of ``alpha`` that is left
    (also when its fraction is below 1, e.g. seeds lost). A look with nothing to spend (a
    fraction equal to the one before) gets ``inf``.
    """
    if not fractions or any(not 0 < f <= 1 for f in fractions):
        raise ValueError(f"information fractions must lie in (0, 1], got {fractions}")
    if any(b < a for a, b in itertools.pairwise(fractions)):
        raise ValueError(f"information fractions must not decrease, got {fractions}")
    spent = [SPENDING[kind](alpha, f) for f in fractions]
    if final:
        spent[-1] = alpha
    c1 = float(stats.norm.isf(spent[0] / 2))
    bounds = [c1]
    # density of W(t_1) on the continuation region |W| < c_1 sqrt(t_1)
    x, w = _simpson(-c1 * math.sqrt(fractions[0]), c1 * math.sqrt(fractions[0]))
    dens = stats.norm.pdf(x, scale=math.sqrt(fractions[0]))
    for j in range(1, len(fractions)):
        t_prev, t = fractions[j - 1], fractions[j]
        target = spent[j] - spent[j - 1]
        if target <= 0 or t == t_prev:
            bounds.append(math.inf)
            continue
        sd = math.sqrt(t - t_prev)
        mass = dens * w

        def crossing(
            c: float, mass: np.ndarray = mass, x: np.ndarray = x, sd: float = sd, t: float = t
        ) -> float:
            edge = c * math.sqrt(t)
            return float(mass @ (special.ndtr((x - edge) / sd) + special.ndtr((-edge - x) / sd)))

        reach = crossing(0.0)
        if target >= reach:  # spend more than can still be crossed: reject everything left
            bounds.append(0.0)
            break
        c = optimize.brentq(lambda c, target=target: crossing(c) - target, 0.0, 50.0, xtol=1e-10)
        bounds.append(float(c))
        nx, nw = _simpson(-c * math.sqrt(t), c * math.sqrt(t))
        dens = np.exp(-0.5 * ((nx[:, None] - x[None, :]) / sd) ** 2) @ mass / (sd * _ROOT_2PI)
        x, w = nx, nw
    return tuple(bounds)


@functools.lru_cache(maxsize=4096)
def nominal_levels(
    alpha: float, fractions: tuple[float, ...], final: bool = False, kind: str = "power"
) -> tuple[float, ...]:
    """The bounds of :func:`boundaries` as two-sided nominal p-values ``2 (1 - Φ(c_j))``: look j
    rejects where its test's two-sided p-value is at most the j-th value."""
    return tuple(float(2 * stats.norm.sf(c)) for c in boundaries(alpha, fractions, final, kind))


def look_fractions(counts: Sequence[float], max_seeds: int) -> tuple[float, ...]:
    """Information fractions ``n_eff / max`` of looks at the effective seed counts ``counts``
    (``n_eff = 2 n m / (n + m)``, the harmonic mean of the two sides' seeds), capped at 1."""
    return tuple(min(1.0, float(c) / max_seeds) for c in counts)


#: pools whose degrees of freedom at the first look are below this get t-calibrated levels
CALIBRATE_BELOW_DF = 10
#: null paths of the calibration's Monte Carlo, and its generator seed (fixed: reproducible)
CALIBRATION_PATHS = 100_000
CALIBRATION_SEED = 0


#: the largest ``max`` whose calibration draws every path at once (its memory, about
#: ``4 x 2 x CALIBRATION_PATHS x max`` floats, 100 MB at 16), as since issue 48, bit for bit
EXACT_MAX = 16
#: above :data:`EXACT_MAX`, the looks up to this many seeds are simulated, :data:`CHUNK` paths
#: at a time (:func:`t_calibrated_alpha`); later ones count with their z design's share
SIMULATED_SEEDS = 64
#: paths simulated at once above :data:`EXACT_MAX`
CHUNK = 5_000


def _simulate(
    rng: np.random.Generator, looks: tuple[int, ...], groups: int, paths: int
) -> np.ndarray:
    """Two-sided p-values (shape ``(paths, len(looks))``) of ``paths`` null paths drawn from
    ``rng`` (see :func:`_null_pvalues`)."""
    counts = np.asarray(looks)
    top = int(counts[-1])
    x = rng.standard_normal((2, paths, top))
    cs, cs2 = np.cumsum(x, axis=-1)[..., counts - 1], np.cumsum(x**2, axis=-1)[..., counts - 1]
    ss = (cs2 - cs**2 / counts).sum(axis=0)
    if groups > 2:
        extra = np.cumsum(rng.chisquare(groups - 2, (paths, top - 1)), axis=1)
        ss = ss + np.concatenate([np.zeros((paths, 1)), extra], 1)[:, counts - 1]
    df = groups * (counts - 1)
    t = (cs[0] - cs[1]) / counts / np.sqrt(ss / df * 2 / counts)
    return np.asarray(2 * stats.t.sf(np.abs(t), df))


@functools.lru_cache(maxsize=8)
def _null_pvalues(looks: tuple[int, ...], groups: int) -> np.ndarray:
    """Two-sided p-values (shape ``(CALIBRATION_PATHS, len(looks))``) of the pooled t statistic
    of a row against the reference on null paths, both sides at ``looks[j]`` normal seeds and
    the pool's other ``groups - 2`` groups adding ``groups - 2`` chi-square degrees of freedom
    per seed (a group's within sum of squares grows by ``σ² χ²_1`` per seed): ``df_j =
    groups (looks[j] - 1)``. Seeded (``CALIBRATION_SEED``). Up to ``looks[-1] <=``
    :data:`EXACT_MAX` all paths are drawn at once (the calibration's constants since issue 48);
    beyond, :data:`CHUNK` paths at a time from the same seed (memory ``CHUNK x looks[-1]`` a side,
    whatever the number of paths)."""
    rng = np.random.default_rng(CALIBRATION_SEED)
    if looks[-1] <= EXACT_MAX:
        return _simulate(rng, looks, groups, CALIBRATION_PATHS)
    out = np.empty((CALIBRATION_PATHS, len(looks)))
    for start in range(0, CALIBRATION_PATHS, CHUNK):
        n = min(CHUNK, CALIBRATION_PATHS - start)
        out[start : start + n] = _simulate(rng, looks, groups, n)
    return out


@functools.lru_cache(maxsize=256)
def t_calibrated_alpha(
    alpha: float, looks: tuple[int, ...], groups: int, kind: str = "power"
) -> float:
    """The level ``α* <= α`` to spend so that the nominal levels of spending function ``kind``,
    applied to the pooled t statistic of one row against the reference, reject a true ``Δ = 0`` at
    some look with probability ``α`` when the pool's variance has few degrees of freedom.

    Null paths (:func:`_null_pvalues`): row and reference at ``looks[j]`` seeds each, look j's
    t statistic on ``df_j = groups (looks[j] - 1)``. The joint law of those t's is not the z's
    that the bounds were computed for: their variance estimates differ between looks, so they are
    less correlated than the z's and each look's exact nominal level adds up to more than α (5.4%
    for a lone pair at 2-8 seeds, df 2 to 14, ``power`` spending). ``α`` itself where the pool has
    ``CALIBRATE_BELOW_DF`` degrees of freedom or more at the first look (the error is then held
    within the simulation's precision: ``benchmarks/sim_adaptive_seeds.py``), or where the
    paths' error at ``α`` is already at most the target: α less two Monte Carlo standard errors
    of the paths (so that their own noise errs on the safe side).

    Memory and time stay bounded whatever ``max`` (``seeds.max`` may be 10,000; every path at
    once would need 16 GB there): up to ``max`` = :data:`EXACT_MAX` the paths are drawn at once,
    as since issue 48 (the same constants, bit for bit); above it :data:`CHUNK` paths at a time,
    and only the looks up to :data:`SIMULATED_SEEDS` seeds, whose t statistics are the ones with
    few degrees of freedom; every later look (df at least ``groups x 64``) counts with its z
    design's share, ``α* - α*(t_K)`` for the spending function at the last simulated look's
    fraction ``t_K`` (a lone pair at 2-128 seeds: 0.0481, all paths of every look 0.0477; the
    paths' stream alone moves it as much, 0.0458 against 0.0453 at 2-24 seeds, both simulated
    in full). The error's Monte Carlo standard error is
    that of the simulated share, at most ``sqrt(α (1 - α) / CALIBRATION_PATHS)`` (0.0007 at
    α = 0.05), and the target keeps its two standard errors' margin.
    """
    if groups * (looks[0] - 1) >= CALIBRATE_BELOW_DF:
        return alpha
    top = looks[-1]
    fractions = look_fractions(looks, top)
    # the looks simulated: every one up to SIMULATED_SEEDS seeds
    k = sum(1 for n in looks if n <= SIMULATED_SEEDS)
    p = _null_pvalues(looks[:k], groups)
    spend = SPENDING[kind]

    def error(a: float) -> float:
        levels = nominal_levels(a, fractions[:k], k == len(looks), kind)  # a prefix's bounds
        simulated = float((p <= np.asarray(levels)).any(axis=1).mean())
        # the later looks (df >= groups x SIMULATED_SEEDS, t close to z): their z design's share
        return simulated if k == len(looks) else simulated + a - spend(a, fractions[k - 1])

    # aim two Monte Carlo standard errors under α: the paths' own noise errs on the safe side
    target = alpha - 2 * math.sqrt(alpha * (1 - alpha) / CALIBRATION_PATHS)
    if error(alpha) <= target:
        return alpha
    lo, hi = alpha / 4, alpha
    for _ in range(12):  # bisection in log a: the last step is a factor 4^(1/4096)
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if error(mid) <= target else (lo, mid)
    return lo
