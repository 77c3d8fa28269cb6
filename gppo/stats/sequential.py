"""Adaptive seeds: which rows of Table 1 are decided, and which get the next seeds (issue 48).

Every cell starts with ``min`` seeds; after each round (a look) a row compared with the reference
is *separated*, *equivalent* within ``margin`` points, *futile* ("not separable within max"), or
goes on with ``batch`` more seeds, and the reference with it, until ``max``. The data of a row are
its per-seed scores (a run's average over benchmarks, shape ``(n,)``) and the reference's (shape
``(m,)``).

**The rule** (a group-sequential t-test per row, Jennison & Turnbull, *Group Sequential Methods
with Applications to Clinical Trials*, 2000):

1. ``Δ̂ = x̄ - ȳ``, ``T = Δ̂ / se``. With Welch's test (``Design.test = "welch"``, the
   default, as Table 1's; issue 58): ``se² = s_x²/n + s_y²/m``, each side's own variance, on
   Welch-Satterthwaite's ``df = se⁴ / ((s_x²/n)²/(n-1) + (s_y²/m)²/(m-1))`` (Welch, Biometrika
   34, 1947; Satterthwaite, Biometrics Bull. 2, 1946): no row borrows the reference's or another
   row's variance, so a noisier reference or one erratic row does not inflate the error. With
   the pooled test (``"pooled"``): ``se = s sqrt(1/n + 1/m)``, ``s²`` the within-cell variance
   pooled over the table's rows (:func:`gppo.stats.inference.pooled_variance`), on
   ``df = Σ_g (n_g - 1)``: more power at 2-3 seeds, valid only where every cell's seeds scatter
   alike (``benchmarks/error_rate.py`` measures both).
2. The look's information fraction is ``t = n_eff / max``, ``n_eff = 2nm / (n + m)``; the planned
   looks are at ``min, min + batch, ..., max`` seeds. The bounds ``c_j`` spend the row's level
   ``α_r`` over the looks with Kim & DeMets's power function ``α t^4`` (or Lan-DeMets's
   O'Brien-Fleming type, ``spending="obf"``; :mod:`gppo.stats.spending`); the last planned
   look spends all that is left. The exponent 4 and the futility threshold (6.) were chosen on
   the quick start's effects by ``benchmarks/sim_adaptive_seeds.py`` (O'Brien-Fleming type with
   5%: 70.0% of the fixed sweep's runs, power up to 0.052 lower; ``α t^4`` with 3%: 69.6%,
   0.043).
3. **Small n, unknown variance.** The bounds are on a z statistic; the rule applies each as its
   two-sided nominal level ``p_j = 2 (1 - Φ(c_j))`` to the t statistic on the current ``df``
   (reject where ``2 P(T_df > |T|) <= p_j``): Jennison & Turnbull's "significance level approach"
   (§3.8), exact at each look on its own. Jointly the t's of successive looks, whose variance
   estimates differ, are less correlated than the z's, so the levels add up to more than α where
   ``df`` is small: 5.4% for a lone pair at 2-8 seeds (df 2 to 14). Pooling over the table keeps
   ``df`` usable (17 rows and the reference at 2 seeds: df = 18, error under α); a pool with
   under 10 df at the first look spends a smaller α instead (4.5% for that pair), calibrated by a
   seeded simulation of its null t statistics (:func:`gppo.stats.spending.t_calibrated_alpha`).
   Welch's test calibrates every row as such a lone pair (``groups`` = 2: with equal seeds on
   both sides the pooled t of a pair is Welch's t, on at least Welch's df, so the calibration
   errs on the safe side). The benchmarks (``benchmarks/sim_adaptive_seeds.py``,
   ``benchmarks/error_rate.py``) measure the joint error, a lone pair included.
4. **Correction over the table's rows**, K the rows compared (``Design.rows``, e.g. with the base
   model's row decided outside this rule): Holm's step-down in the group-sequential form of
   Maurer & Bretz (Stat. Biopharm. Res. 5, 2013), the default: a separated row passes its level
   on, the open rows are tested at ``α / (K - r)`` with ``r`` rows separated, bounds recomputed at
   that level; or Bonferroni, ``α / K`` for every row (``correction="bonferroni"``).
5. **Intervals valid under the design**: the repeated confidence interval ``Δ̂ ± q se``, ``q`` the
   t quantile of the look's nominal level at ``α / K`` (Jennison & Turnbull, ch. 9): with
   probability at least ``1 - α`` every row's interval covers its Δ at every look at once
   (Bonferroni over rows). A row is *separated* where its test rejects (with Bonferroni: exactly
   where its interval excludes 0; with Holm its interval may still touch 0), *equivalent* where
   its interval lies inside ``(-margin, margin)`` (two one-sided tests at ``α / 2K`` each).
6. **Futility** (non-binding: it only ever stops a row, so the error of separations is unchanged):
   a row whose predictive probability of a separation at ``max`` (and, with a margin, of
   equivalence there) is below ``Design.futility`` (3%) stops as futile. The predictive law of the
   final ``Δ̂`` given the data, flat prior, is ``N(Δ̂, se² - se_max²)`` (Spiegelhalter, Freedman &
   Blackburn, Control. Clin. Trials 7, 1986); the final bound is the planned one. At 2 seeds that
   law is wide, so a row is rarely dropped on its first look. A row at ``max`` that is neither
   separated nor equivalent is futile (reason ``max``).
7. Rows the cell-equivalence criterion runs on the reference's own runs (``same_runs``: chi2/mc =
   tv/mc) are equivalent at once, Δ = 0 exactly, and get no seeds of their own.

**Guarantees.** With normal per-seed scores (of equal variance in every cell for the pooled
test; any variances for Welch's, up to its approximation): the probability of
any wrong separation (a row separated whose mean equals the reference's), over all rows and looks,
is at most α (up to the t approximation of 3., which the benchmark measures); with Bonferroni, the
same holds for any wrong separation or wrong equivalence together (with Holm, wrong equivalences
are held at α on their own). **Not guaranteed:** the pooled test's error
with unequal seed variances (the pooled ``s`` then misstates a row's se: 19% for a reference
with twice the rows' sd), the error with heavy tails at 2-3 seeds, nor any power: futility and the spread of α over looks cost power against a fixed
sweep at ``max`` seeds (the benchmark measures how much).

**Why not an anytime-valid method** (confidence sequences, e-processes: the ``confseq``,
``savvi`` and ``expectation`` packages): they hold the error at every n with no planned end, and
pay for it with wider bounds at any given n than a design that knows its looks and its ``max``;
their t versions are asymptotic or need a prior on the variance, neither apt at 2-10 runs. A
group-sequential design is the textbook answer for a handful of planned looks;
:mod:`gppo.stats.spending` computes its bounds.

:func:`decide` takes one table's scores; :func:`decide_batch` the same rule on arrays of many
simulated tables at once (it is what :func:`decide` calls).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy import stats

from gppo.objectives import defaults
from gppo.stats import spending
from gppo.stats.inference import ALPHA, DEFAULT_TEST, TESTS, pooled_variance

CONTINUE, SEPARATED, EQUIVALENT, FUTILE = 0, 1, 2, 3
#: status code -> the word reports use
STATUS_NAMES = {
    CONTINUE: "continue",
    SEPARATED: "separated",
    EQUIVALENT: "equivalent",
    FUTILE: "futile",
}
CORRECTIONS = ("bonferroni", "holm")
#: predictive probability below which a row stops as futile (see the module docstring, 6.)
FUTILITY = 0.03


@dataclass(frozen=True)
class Design:
    """The adaptive design of one table: ``seeds: {min, max}``, the batch per round, ``α``, the
    equivalence margin in points (None: no equivalence decisions), the size of the correction's
    family (``rows``; None: the rows given to :func:`decide`), the correction, the futility
    threshold, the spending function (:data:`gppo.stats.spending.SPENDING`) and the test
    (``welch``, the default, or ``pooled``: :data:`gppo.stats.inference.TESTS`). Bad values
    raise ``ValueError`` in one line naming the field."""

    min_seeds: int = defaults.SEEDS_MIN
    max_seeds: int = defaults.SEEDS_MAX
    batch: int = defaults.SEEDS_BATCH
    alpha: float = ALPHA
    margin: float | None = None
    rows: int | None = None
    correction: str = "holm"
    futility: float = FUTILITY
    spending: str = "power"
    test: str = DEFAULT_TEST

    def __post_init__(self) -> None:
        checks = [
            ("min", self.min_seeds >= 2, f"at least 2 (got {self.min_seeds})"),
            ("max", self.max_seeds >= self.min_seeds, f"at least min (got {self.max_seeds})"),
            ("batch", self.batch >= 1, f"at least 1 (got {self.batch})"),
            ("alpha", 0 < self.alpha < 1, f"in (0, 1) (got {self.alpha})"),
            ("margin", self.margin is None or self.margin > 0, f"> 0 (got {self.margin})"),
            ("rows", self.rows is None or self.rows >= 1, f"at least 1 (got {self.rows})"),
            ("correction", self.correction in CORRECTIONS, f"one of {', '.join(CORRECTIONS)}"),
            ("futility", 0 <= self.futility < 1, f"in [0, 1) (got {self.futility})"),
            (
                "spending",
                self.spending in spending.SPENDING,
                f"one of {', '.join(spending.SPENDING)}",
            ),
            ("test", self.test in TESTS, f"one of {', '.join(TESTS)}"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"seeds.{name}: must be {allowed}")

    @property
    def looks(self) -> tuple[int, ...]:
        """Seed counts of the planned looks: ``min, min + batch, ..., max``."""
        return (*range(self.min_seeds, self.max_seeds, self.batch), self.max_seeds)


def _thresholds(design: Design, family: int, n_eff: float, groups: int) -> np.ndarray:
    """Nominal two-sided levels of a look at ``n_eff`` effective seeds, at the levels
    ``α / L`` for ``L = 0..family`` (shape ``(family + 1,)``; index 0 unused, 0.0), each
    level first t-calibrated for a pool of ``groups`` groups
    (:func:`gppo.stats.spending.t_calibrated_alpha`)."""
    looks = design.looks
    planned = [c for c in looks if c < n_eff - 1e-9]
    fractions = spending.look_fractions([*planned, n_eff], design.max_seeds)
    final = n_eff >= design.max_seeds - 1e-9
    at = len(planned) if abs(looks[len(planned)] - n_eff) < 1e-9 else None
    if at is not None:  # a planned look: the design's bounds (those of earlier looks are a prefix)
        fractions, final = spending.look_fractions(looks, design.max_seeds), True
    out = np.zeros(family + 1)
    levels = range(1, family + 1) if design.correction == "holm" else [family]
    for L in levels:
        level = spending.t_calibrated_alpha(design.alpha / L, looks, groups, design.spending)
        nominal = spending.nominal_levels(level, fractions, final, design.spending)
        out[L] = nominal[-1 if at is None else at]
    if design.correction != "holm":
        out[1:] = out[family]
    return out


@dataclass(frozen=True)
class Batch:
    """:func:`decide_batch`'s answer for S tables of K rows: ``status`` (S, K) codes, the
    intervals ``lo``, ``hi`` (S, K), the t statistics ``t`` (S, K) and the predictive
    probability of a separation at max ``power`` (S, K; nan where not computed)."""

    status: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    t: np.ndarray
    power: np.ndarray


def decide_batch(
    delta: npt.ArrayLike,
    n: npt.ArrayLike,
    m: npt.ArrayLike,
    s2: npt.ArrayLike,
    df: npt.ArrayLike | None,
    status: npt.ArrayLike,
    design: Design,
    family: int | None = None,
    groups: int | None = None,
    ref_s2: npt.ArrayLike | None = None,
) -> Batch:
    """One look of the rule (module docstring) for S tables of K rows at once.

    ``delta`` (S, K): each row's ``x̄ - ȳ``; ``n`` (S, K) and ``m`` (S,): seeds of the rows and
    of the reference; ``status`` (S, K): the codes so far (decided rows keep theirs);
    ``family``: K of the correction (default ``design.rows``, else K).

    The pooled test (``ref_s2`` None): ``s2``, ``df`` (S,) the pooled variance and its degrees
    of freedom, ``se = s sqrt(1/n + 1/m)``; ``groups``: the groups of the pool (default K + 1),
    for the small-df calibration of the levels. Welch's test (``ref_s2`` (S,) the reference's
    own variance): ``s2`` (S, K) each row's own variance, ``se² = s_x²/n + s_y²/m`` on
    Welch-Satterthwaite's ``df = se⁴ / ((s_x²/n)²/(n-1) + (s_y²/m)²/(m-1))`` (``df`` ignored),
    the levels calibrated as for a lone pair (``groups`` = 2: the pooled t of a pair with equal
    seeds is Welch's t on at least Welch's df, so the calibration errs on the safe side).
    """
    delta, n = np.asarray(delta, float), np.asarray(n, float)
    S, K = delta.shape
    m = np.asarray(m, float)[:, None]
    welch = ref_s2 is not None
    if welch:
        vx = np.broadcast_to(np.asarray(s2, float), (S, K))
        vy = np.asarray(ref_s2, float)[:, None]
        a, b = vx / n, vy / m
        with np.errstate(divide="ignore", invalid="ignore"):
            dfs = (a + b) ** 2 / (a**2 / np.maximum(n - 1, 1) + b**2 / np.maximum(m - 1, 1))
        dfs = np.where(np.isfinite(dfs), dfs, 0.0)
        # the df the row will have at max seeds on both sides (its variances as now)
        with np.errstate(divide="ignore", invalid="ignore"):
            df_max = (vx + vy) ** 2 / (vx**2 + vy**2) * (design.max_seeds - 1)
        df_max = np.where(np.isfinite(df_max), df_max, design.max_seeds - 1)
        pool = 2
    else:
        vx = vy = np.asarray(s2, float)[:, None]
        dfs = np.broadcast_to(np.asarray(df, float)[:, None], (S, K))
        df_max = None
        pool = groups or K + 1
    fam = family or design.rows or K
    n_eff = 2 * n * m / (n + m)
    new = np.array(status, dtype=int, copy=True)
    open_ = new == CONTINUE
    # decided rows keep their status and their interval of the look they stopped at (nan here)
    look_at = np.where(open_, np.round(n_eff, 9), design.max_seeds)
    uniq, inv = np.unique(look_at, return_inverse=True)
    table = np.stack([_thresholds(design, fam, u, pool) for u in uniq])  # (U, fam + 1)
    inv = inv.reshape(S, K)
    se = np.sqrt(vx / n + vy / m)
    ok = (se > 0) & (dfs > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(ok, delta / np.where(ok, se, 1), 0.0)
    p = np.where(ok, 2 * stats.t.sf(np.abs(t), np.maximum(dfs, 1e-9)), 1.0)
    q = stats.t.isf(table[inv, fam] / 2, np.maximum(dfs, 1e-9))
    lo = np.where(open_, np.where(ok, delta - q * se, -np.inf), np.nan)
    hi = np.where(open_, np.where(ok, delta + q * se, np.inf), np.nan)
    # separations: Holm's step-down over the open rows (Bonferroni: every L gives α / K)
    r0 = (new == SEPARATED).sum(axis=1, keepdims=True)
    order = np.argsort(np.where(open_, p, np.inf), axis=1, kind="stable")
    L = np.clip(fam - r0 - np.arange(K)[None, :], 1, fam)
    thr = table[np.take_along_axis(inv, order, 1), L]
    hit = np.take_along_axis(open_, order, 1) & (np.take_along_axis(p, order, 1) <= thr)
    rejected = np.zeros_like(open_)
    np.put_along_axis(rejected, order, np.cumprod(hit, axis=1).astype(bool), 1)
    new[rejected] = SEPARATED
    open_ &= ~rejected
    if design.margin is not None:
        equiv = open_ & (lo > -design.margin) & (hi < design.margin)
        new[equiv] = EQUIVALENT
        open_ &= ~equiv
    at_max = n_eff >= design.max_seeds - 1e-9
    new[open_ & at_max] = FUTILE
    open_ &= ~at_max
    power = np.full((S, K), np.nan)
    if design.futility > 0 and open_.any():
        se_max = np.sqrt((vx + vy) / design.max_seeds)
        if df_max is None:  # the pooled df if the open rows and the reference run to max
            open_count = (new == CONTINUE).sum(axis=1, keepdims=True)
            df_max = np.maximum(dfs, 1) + open_count * design.max_seeds
        power = _predictive(delta, se, se_max, df_max, open_, design, fam, r0)
        eq = _predictive_equivalence(delta, se, se_max, df_max, design, fam)
        new[open_ & (power < design.futility) & (eq < design.futility)] = FUTILE
    return Batch(new, lo, hi, t, power)


def _final_quantile(df_max: np.ndarray, design: Design, level: np.ndarray) -> np.ndarray:
    """The t quantile of the last planned look's bound at ``level`` (S, 1), on the degrees of
    freedom ``df_max`` (S, K) the comparison will have at max seeds."""
    fractions = spending.look_fractions(design.looks, design.max_seeds)
    nominal = np.vectorize(
        lambda a: spending.nominal_levels(float(a), fractions, True, design.spending)[-1]
    )(level)
    return np.asarray(stats.t.isf(nominal / 2, df_max))


def _predictive(
    delta: np.ndarray,
    se: np.ndarray,
    se_max: np.ndarray,
    df_max: np.ndarray,
    open_: np.ndarray,
    design: Design,
    fam: int | np.ndarray,
    r0: np.ndarray,
) -> np.ndarray:
    """Predictive probability (flat prior) that ``|Δ̂|`` at max seeds passes the final bound:
    ``Δ̂_max ~ N(Δ̂, se² - se_max²)``, ``se_max`` the standard error at max seeds on both sides
    with the variances as now; nan where the row is not open."""
    level = design.alpha / (np.maximum(fam - r0, 1) if design.correction == "holm" else fam)
    level = np.broadcast_to(level, (delta.shape[0], 1))
    crit = _final_quantile(df_max, design, level) * se_max
    sd = np.sqrt(np.maximum(se**2 - se_max**2, 1e-12))
    pp = stats.norm.sf((crit - delta) / sd) + stats.norm.cdf((-crit - delta) / sd)
    return np.where(open_, pp, np.nan)


def _predictive_equivalence(
    delta: np.ndarray,
    se: np.ndarray,
    se_max: np.ndarray,
    df_max: np.ndarray,
    design: Design,
    fam: int | np.ndarray,
) -> np.ndarray:
    """Predictive probability that the interval at max lies inside ``(-margin, margin)``; 0
    without a margin or where the interval at max is wider than the margin."""
    if design.margin is None:
        return np.zeros_like(delta)
    level = np.full((delta.shape[0], 1), design.alpha / fam)
    half = _final_quantile(df_max, design, level) * se_max
    room = np.maximum(design.margin - half, 0)
    sd = np.sqrt(np.maximum(se**2 - se_max**2, 1e-12))
    return np.where(
        room > 0, stats.norm.cdf((room - delta) / sd) - stats.norm.cdf((-room - delta) / sd), 0.0
    )


@dataclass(frozen=True)
class RowDecision:
    """One row after a look: ``status`` (a :data:`STATUS_NAMES` word), ``reason`` (``bound``,
    ``futility``, ``max``, ``same runs``, ``earlier``), its seeds, Δ̂ and the interval valid
    under the design (None where no variance can be estimated)."""

    status: str
    reason: str
    n: int
    delta: float
    interval: tuple[float, float] | None


@dataclass(frozen=True)
class Round:
    """The rule's answer after one look: each row's decision; the seeds each row gets next (0
    for a decided row); the reference's next seeds; ``done`` when no row goes on."""

    rows: dict[str, RowDecision]
    next_seeds: dict[str, int] = field(default_factory=dict)
    reference_next: int = 0

    @property
    def done(self) -> bool:
        return not any(self.next_seeds.values())


def _reason(code: int, same: bool, earlier: bool, at_max: bool) -> str:
    """Why a row stopped (:class:`RowDecision`'s ``reason``); empty while it goes on."""
    if same:
        return "same runs"
    if earlier:
        return "earlier"
    if code == FUTILE:
        return "max" if at_max else "futility"
    return "bound" if code in (SEPARATED, EQUIVALENT) else ""


def decide(
    rows: Mapping[str, Sequence[float]],
    reference: Sequence[float],
    design: Design,
    decided: Mapping[str, str] | None = None,
    same_runs: Collection[str] = (),
    look: int | None = None,
) -> Round:
    """Apply the rule to one table: ``rows`` maps a row's name to its per-seed scores (shape
    ``(n,)``), ``reference`` the reference's (shape ``(m,)``); ``decided`` maps rows decided at
    an earlier look to their status word (kept as they are); ``same_runs``: rows run on the
    reference's own runs. The look is the one the seed counts are at (the state is the data, so
    a relaunched launcher gets the same answer); ``look`` (0-based), where given, is checked
    against the reference's seeds (``design.looks[look]``). The pooled variance is over the reference and
    every row not in ``same_runs``."""
    decided = dict(decided or {})
    names = list(rows)
    unknown = [k for k in [*decided, *same_runs] if k not in rows]
    if unknown:
        raise ValueError(f"rows not in the table: {', '.join(unknown)}")
    ref = np.asarray(reference, float)
    if look is not None and not (0 <= look < len(design.looks) and design.looks[look] == ref.size):
        raise ValueError(
            f"look {look}: the reference has {ref.size} seeds; the design's looks are at "
            f"{', '.join(map(str, design.looks))} seeds"
        )
    groups = [np.asarray(rows[k], float) for k in names]
    if ref.size < 2 or any(g.size < 2 for g in groups):
        raise ValueError("every row and the reference need at least 2 seeds (seeds.min >= 2)")
    codes = {v: k for k, v in STATUS_NAMES.items()}
    bad = sorted({v for v in decided.values() if v not in codes or v == "continue"})
    if bad:
        raise ValueError(
            f"decided: unknown status {', '.join(bad)}; allowed: separated, equivalent, futile"
        )
    status = np.array([[codes[decided.get(k, "continue")] for k in names]])
    for i, k in enumerate(names):
        if k in same_runs:
            status[0, i] = EQUIVALENT
    delta = np.array([[g.mean() - ref.mean() for g in groups]])
    n = np.array([[g.size for g in groups]])
    if design.test == "welch":  # each row's own variance and the reference's
        own = np.array([[g.var(ddof=1) for g in groups]])
        out = decide_batch(
            delta, n, [ref.size], own, None, status, design, ref_s2=[ref.var(ddof=1)]
        )
    else:
        s2, df = pooled_variance(
            [list(reference), *(list(rows[k]) for k in names if k not in same_runs)]
        )
        pool = 1 + sum(k not in same_runs for k in names)
        out = decide_batch(
            delta, n, [ref.size], [s2 if df else 0.0], [df], status, design, None, pool
        )
    result, nxt = {}, {}
    later = [c for c in design.looks if c > ref.size]
    target = later[0] if later else design.max_seeds
    for i, k in enumerate(names):
        code, seeds = int(out.status[0, i]), int(n[0, i])
        lo, hi = float(out.lo[0, i]), float(out.hi[0, i])
        interval = (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None
        if k in same_runs:
            interval = (0.0, 0.0)
        reason = _reason(code, k in same_runs, k in decided, seeds >= design.max_seeds)
        result[k] = RowDecision(STATUS_NAMES[code], reason, seeds, float(delta[0, i]), interval)
        nxt[k] = max(0, target - seeds) if code == CONTINUE else 0
    ref_next = max(0, target - ref.size) if any(nxt.values()) else 0
    return Round(result, nxt, ref_next)
