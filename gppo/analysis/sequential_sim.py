"""Simulated sweeps under the adaptive-seeds rule (:mod:`gppo.analysis.sequential`), vectorised
over sweeps, and the fixed sweep at ``max`` seeds they are compared with.

A simulated table has K rows and the reference; row k's per-seed scores are ``effect_k + e`` and
the reference's ``e``, with ``e`` drawn by ``noise(rng, shape)`` (default: normal, sd ``sd``
points). Every cell's ``max`` seeds are drawn up front (shape ``(S, K, max)``, ``(S, max)``);
the adaptive sweep uses the first n of them, so both sweeps see the same runs.
``benchmarks/sim_adaptive_seeds.py`` prints the tables; ``tests/analysis/test_sequential.py``
checks the A/A error with a few hundred sweeps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from gppo.analysis.sequential import CONTINUE, EQUIVALENT, SEPARATED, Design, decide_batch

Noise = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def normal_noise(sd: float) -> Noise:
    """Normal seed noise with standard deviation ``sd`` points."""
    return lambda rng, shape: rng.normal(0.0, sd, shape)


def resampled_noise(values: Sequence[float]) -> Noise:
    """Seed noise drawn with replacement from recorded per-seed scores, centred on their mean."""
    arr = np.asarray(values, float)
    arr = arr - arr.mean()
    return lambda rng, shape: rng.choice(arr, size=shape, replace=True)


@dataclass(frozen=True)
class Sweeps:
    """S simulated sweeps: ``status`` (S, K) final codes, ``n`` (S, K) seeds per row, ``m`` (S,)
    the reference's, ``runs`` (S,) runs used (the reference and every row not run on its runs),
    ``fixed_holm``/``fixed_bh`` (S, K): the rows the fixed sweep at max seeds separates (pooled
    t-test, Holm / Benjamini-Hochberg over the family), ``fixed_runs`` its runs."""

    status: np.ndarray
    n: np.ndarray
    m: np.ndarray
    runs: np.ndarray
    fixed_holm: np.ndarray
    fixed_bh: np.ndarray
    fixed_runs: int


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
        keep = np.cumprod(ps <= alpha / (family - j), axis=1).astype(bool)
    else:  # BH: the largest rank whose p is under its line, and every rank below it
        under = ps <= alpha * (j + 1) / family
        last = np.where(under.any(axis=1), K - 1 - np.argmax(under[:, ::-1], axis=1), -1)
        keep = np.arange(K)[None, :] <= last[:, None]
    out = np.zeros_like(keep)
    np.put_along_axis(out, order, keep, 1)
    return out


def simulate(
    effects: Sequence[float],
    design: Design,
    sweeps: int,
    rng: np.random.Generator,
    noise: Noise,
    same_runs: Sequence[bool] | None = None,
    separated_outside: int = 0,
) -> Sweeps:
    """Run ``sweeps`` tables with true Δs ``effects`` (shape ``(K,)``) under ``design`` and the
    fixed sweep at ``design.max_seeds``. ``same_runs`` (K,): rows run on the reference's runs
    (their scores are the reference's; no runs of their own). ``separated_outside``: rows of
    the family decided outside the rule (the base model's), counted separated from the start.
    """
    eff = np.asarray(effects, float)
    K, S, top = eff.size, sweeps, design.max_seeds
    same = np.zeros(K, bool) if same_runs is None else np.asarray(same_runs, bool)
    family = design.rows or K + separated_outside
    y = noise(rng, (S, top))
    x = eff[None, :, None] + noise(rng, (S, K, top))
    x[:, same, :] = y[:, None, :]
    n = np.full((S, K), design.min_seeds)
    m = np.full(S, design.min_seeds)
    status = np.where(np.broadcast_to(same, (S, K)), EQUIVALENT, CONTINUE)
    # rows decided outside sit in the Holm count as separated ones: a column of zeros of Δ
    extra = np.full((S, separated_outside), SEPARATED)
    for target in (*design.looks[1:], None):
        xm, xss = _sums(x, n)
        ym, yss = _sums(y, m)
        s2 = (xss[:, ~same].sum(1) + yss) / ((n[:, ~same] - 1).sum(1) + m - 1)
        df = (n[:, ~same] - 1).sum(1) + m - 1
        out = decide_batch(
            np.hstack([xm - ym[:, None], np.zeros((S, separated_outside))]),
            np.hstack([n, np.full((S, separated_outside), design.min_seeds)]),
            m,
            s2,
            df,
            np.hstack([status, extra]),
            design,
            family,
            int((~same).sum()) + 1,
        )
        status = out.status[:, :K]
        going = status == CONTINUE
        if target is None or not going.any():
            break
        n = np.where(going, target, n)
        m = np.where(going.any(axis=1), target, m)
    runs = m + np.where(same[None, :], 0, n).sum(1)
    # the fixed sweep: every row at max seeds, pooled t-test
    xm, xss = _sums(x, np.full((S, K), top))
    ym, yss = _sums(y, np.full(S, top))
    df = (top - 1) * ((~same).sum() + 1)
    s2 = (xss[:, ~same].sum(1) + yss) / df
    t = (xm - ym[:, None]) / np.sqrt(s2[:, None] * 2 / top)
    p = np.where(same[None, :], 1.0, 2 * stats.t.sf(np.abs(t), df))
    holm = _stepped(p, design.alpha, family, "holm", separated_outside)
    bh = _stepped(p, design.alpha, family, "bh", separated_outside)
    return Sweeps(status, n, m, runs, holm, bh, int(top * ((~same).sum() + 1)))
