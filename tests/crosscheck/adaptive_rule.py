"""The adaptive seeds' Stopped column, recomputed from the runs (issue 57).

Written from docs/statistics.md ("Adaptive seeds (the rule)", the columns ``stop_status``,
``stop_reason``, ``stop_seeds``, ``stopped`` and what Δ of an adaptive row is), with plain numpy
and scipy; it imports nothing from ``gppo.stats`` nor ``gppo.analysis``. Two layers:

- :func:`row_disagreements`: what a row's stop must satisfy whatever the rule's bounds (its
  seed count against its finished runs, Δ over the seeds named in Stopped, the interval against
  the status, a failed seed, the budget, the reference's own runs, the Stopped text);
- :func:`replay`: the rule itself, look by look, with the critical values of :data:`CRITICAL`
  (committed numbers, not re-derived: the issue allows the bounds as data); each row's status,
  reason, seeds, Δ and interval compared with ``table1.csv``'s. A design whose values are not in
  :data:`CRITICAL` (or a test other than Welch's) gets the first layer only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

ALPHA = 0.05
#: a row whose predictive probability of a separation at max is below this stops as futile
FUTILITY = 0.03
#: table1.csv rounds Δ and its interval to 0.1 point
ROUND = 0.051
DECIDED = ("separated", "equivalent", "futile")

#: (min, max, batch, L) -> (the nominal two-sided level of each planned look at α/L, Welch's
#: t-calibrated level spent with α t^4; the last look's nominal level at α/L without the
#: calibration, which the futility and equivalence predictions use). Produced once, at commit
#: time, with the product's own functions (the check must not import them):
#:
#:     from gppo.stats import spending
#:     from gppo.stats.sequential import Design
#:     d = Design(min_seeds=mn, max_seeds=mx, batch=b)
#:     fr = spending.look_fractions(d.looks, mx)
#:     a = spending.t_calibrated_alpha(0.05 / L, d.looks, 2, "power")
#:     (spending.nominal_levels(a, fr, True, "power"),
#:      spending.nominal_levels(0.05 / L, fr, True, "power")[-1])
#:
#: for (2, 3, 1) and (2, 4, 1) with L = 1..3 and the default (2, 8, 1) with L = 1..17.
CRITICAL: dict[tuple[int, int, int, int], tuple[tuple[float, ...], float]] = {
    (2, 3, 1, 1): ((0.008731755973593512, 0.041724634950882834), 0.04730619793064712),
    (2, 3, 1, 2): ((0.004243504439808579, 0.020009131902974656), 0.02334878479545182),
    (2, 3, 1, 3): ((0.0028646524019519527, 0.01341477400844919), 0.015453998109307986),
    (2, 4, 1, 1): (
        (0.0027815469164303506, 0.013019023987604924, 0.040539614931695805),
        0.04570393531382511,
    ),
    (2, 4, 1, 2): (
        (0.001353163960307765, 0.006258706752323405, 0.019316291123970673),
        0.022394772619165046,
    ),
    (2, 4, 1, 3): (
        (0.0008732696812941977, 0.004011866906788344, 0.01231785291223377),
        0.01476304790013736,
    ),
    (2, 8, 1, 1): (
        (0.00017591827690916826, 0.0007906610578065922, 0.0023860005128059393,
         0.005695378336429751, 0.011717990157833206, 0.021747450757826216,
         0.037405185322805186),
        0.04176961156163476,
    ),
    (2, 8, 1, 2): (
        (8.698219960067728e-05, 0.0003876913613808891, 0.001162050163348085,
         0.00275629851142697, 0.005638125634104685, 0.010408253149056709,
         0.017814646520095418),
        0.020120816946657717,
    ),
    (2, 8, 1, 3): (
        (5.586895183036195e-05, 0.00024780345980162456, 0.0007397801333796618,
         0.0017481035991058138, 0.003563460322988743, 0.006557404480780744,
         0.01119058696893519),
        0.013139590861855215,
    ),
    (2, 8, 1, 4): (
        (4.129631813794758e-05, 0.000182586235548935, 0.0005436477099297426,
         0.0012814568274113836, 0.002606260831619129, 0.004785925520259797,
         0.008151590674251615),
        0.00971621789981289,
    ),
    (2, 8, 1, 5): (
        (3.317150435261012e-05, 0.00014633690500386853, 0.00043490526235092524,
         0.001023337834464879, 0.002077937426581502, 0.0038100945810421185,
         0.00648059423625053),
        0.007690310659582308,
    ),
    (2, 8, 1, 6): (
        (2.669587925435934e-05, 0.0001175166516895933, 0.00034862303773165244,
         0.0008189185978562041, 0.0016602528836307542, 0.0030398470779595247,
         0.005163580349805946),
        0.00635400591447505,
    ),
    (2, 8, 1, 7): (
        (2.3139182994889132e-05, 0.00010171908851335685, 0.0003014062525435086,
         0.0007072261116499454, 0.001432359027198241, 0.002620140427573085,
         0.004446811022760365),
        0.005407720851848373,
    ),
    (2, 8, 1, 8): (
        (2.0028687018345217e-05, 8.792478129941515e-05, 0.000260229610021799,
         0.0006099386000458187, 0.0012340753747284055, 0.0022553365106461566,
         0.003824389040406251),
        0.004703144819799933,
    ),
    (2, 8, 1, 9): (
        (1.7563880170833987e-05, 7.700994703547148e-05, 0.0002276877987095447,
         0.0005331400223542763, 0.0010777143110109392, 0.0019679389708930754,
         0.003334473652993246),
        0.004158557522178053,
    ),
    (2, 8, 1, 10): (
        (1.5674304966709576e-05, 6.865311435494104e-05, 0.00020279899716065355,
         0.00047446129053924167, 0.0009583548423111715, 0.0017487372969410891,
         0.0029611019162526873),
        0.003725269164597962,
    ),
    (2, 8, 1, 11): (
        (1.3840593041884178e-05, 6.055323690196988e-05, 0.00017869998932725534,
         0.00041769893309924954, 0.0008429949078989428, 0.001537051910842041,
         0.0026008028707919404),
        0.003372483836206146,
    ),
    (2, 8, 1, 12): (
        (1.2721608805105423e-05, 5.5615713093634965e-05, 0.00016402276252784362,
         0.0003831573746601502, 0.0007728489264112444, 0.0014084250641194984,
         0.00238201696924906),
        0.003079781510379941,
    ),
    (2, 8, 1, 13): (
        (1.1735077331358448e-05, 5.126623187428857e-05, 0.00015110248066097689,
         0.00035277042717044504, 0.0007111769032543575, 0.0012953991411452247,
         0.0021898652123124637),
        0.0028330935088330257,
    ),
    (2, 8, 1, 14): (
        (1.0378512217310885e-05, 4.5291294997989304e-05, 0.00013336859691762872,
         0.00031109539507249664, 0.0006266563955093086, 0.0011406022421063585,
         0.0019268625444671885),
        0.0026224147213621475,
    ),
    (2, 8, 1, 15): (
        (9.962580041554757e-06, 4.346082513420878e-05, 0.00012793938723961267,
         0.0002983448388023007, 0.0006008124662838739, 0.0010932955538307373,
         0.0018465281279787956),
        0.002440437370254756,
    ),
    (2, 8, 1, 16): (
        (9.496104340145553e-06, 4.140880202040296e-05, 0.00012185525135371255,
         0.0002840610637140286, 0.000571869960234552, 0.0010403322817556517,
         0.001756611955527846),
        0.002281700754817175,
    ),
    (2, 8, 1, 17): (
        (9.059328987303468e-06, 3.948831059220788e-05, 0.0001161632991140003,
         0.0002707028905500613, 0.0005448120114018603, 0.0009908328845781944,
         0.0016726003802122467),
        0.002142043237458031,
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Adaptive:
    """A spec's ``seeds: {min, max, batch, equivalence, first}``, its ``retries.max``, whether it
    has a ``budget:`` and whether its test is Welch's (the default)."""

    min: int = 2
    max: int = 8
    batch: int = 1
    margin: float | None = None
    first: int = 0
    retries: int = 0
    budget: bool = False
    welch: bool = True

    @classmethod
    def of_spec(cls, spec: dict) -> Adaptive:
        s = spec["seeds"]
        return cls(
            min=s["min"], max=s["max"], batch=s.get("batch", 1), margin=s.get("equivalence"),
            first=s.get("first", 0), retries=spec.get("retries", {}).get("max", 0),
            budget="budget" in spec,
            welch=spec.get("analysis", {}).get("test", "welch") == "welch",
        )  # fmt: skip

    @property
    def looks(self) -> tuple[int, ...]:
        """The planned looks' seed counts: min, min + batch, ..., max."""
        return (*range(self.min, self.max, self.batch), self.max)

    def levels(self, family: int) -> tuple[tuple[float, ...], float] | None:
        """:data:`CRITICAL`'s values at α/``family`` (None: not committed, or not Welch's)."""
        return CRITICAL.get((self.min, self.max, self.batch, family)) if self.welch else None


@dataclass(frozen=True)
class Stop:
    """Why a row stopped, as table1.csv says it: ``status`` (separated, equivalent, futile,
    open, failed), ``reason``, its seeds, Δ and the interval (None where none is shown)."""

    status: str
    reason: str
    seeds: int
    delta: float | None = None
    lo: float | None = None
    hi: float | None = None

    def text(self) -> str:
        """The Stopped column's words (docs/statistics.md's tag texts)."""
        s = f"{self.seeds} seed{'s' * (self.seeds != 1)}"
        if self.reason == "same runs":
            return "equivalent: the reference's own runs"
        if self.status == "futile":
            return f"not separable within max ({s})" if self.reason == "max" else f"futile at {s}"
        if self.status == "open":
            return f"left by the budget at {s}" if self.reason == "budget" else f"open ({s})"
        if self.status == "failed":
            return f"{self.reason} at {s}: not decided"
        return f"{self.status} at {s}"


@dataclass
class Table:
    """One table of the rounds (a domain and axis point): each row's finished scores by seed
    index (``first`` is index 0), its seeds lost (failed with no retry left), the reference and
    the rows run on the reference's own runs, in table order."""

    scores: dict[str, dict[int, float]]
    reference: str
    lost: dict[str, set[int]] = field(default_factory=dict)
    same: set[str] = field(default_factory=set)

    @property
    def compared(self) -> list[str]:
        return [r for r in self.scores if r != self.reference and r not in self.same]

    def first(self, row: str, k: int) -> np.ndarray:
        """The row's scores of seeds 0..k-1 (all finished)."""
        return np.array([self.scores[row][i] for i in range(k)])

    def has(self, row: str, k: int) -> int:
        """How many of the row's seeds 0..k-1 finished."""
        return sum(i in self.scores.get(row, {}) for i in range(k))

    def delta(self, row: str, k: int) -> float | None:
        """Δ at k seeds: the row's mean over its first k minus the reference's over its first
        k; None where one of them has not finished."""
        if self.has(row, k) < k or self.has(self.reference, k) < k:
            return None
        return float(self.first(row, k).mean() - self.first(self.reference, k).mean())


def tables_of(runs: pd.DataFrame, design: Adaptive, reference: str) -> dict[tuple, Table]:
    """(domain, point) -> its :class:`Table`, from :func:`crosscheck.recompute.runs_frame`'s
    runs (``status``: MLflow's; FAILED attempts over ``retries.max`` lose a seed)."""
    out = {}
    for key, every in runs.groupby(["domain", "point"], sort=False):
        done = every[every["finished"]].sort_values("seed")
        scores = {lab: {} for lab in every["label"].unique()}
        for r in done.itertuples():
            scores[r.label][int(r.seed) - design.first] = float(r.score)
        lost: dict[str, set[int]] = {}
        if "status" in every:
            failed = every[every["status"] == "FAILED"].groupby(["label", "seed"]).size()
            for (lab, seed), times in failed.items():
                if times > design.retries and int(seed) - design.first not in scores[lab]:
                    lost.setdefault(lab, set()).add(int(seed) - design.first)
        ref_runs = set(every[every["label"] == reference]["run_id"])
        same = {
            lab
            for lab, g in every.groupby("label")
            if lab != reference and g["same_runs"].notna().all() and set(g["same_runs"]) <= ref_runs
        }
        out[key] = Table(scores, reference, lost, same)
    return out


# -- the rule, look by look -------------------------------------------------------------------
@dataclass(frozen=True)
class Welch:
    """A row against the reference at one look: Δ, each side's variance and seeds."""

    delta: float
    vx: float
    vy: float
    n: int

    @property
    def se(self) -> float:
        return math.sqrt((self.vx + self.vy) / self.n)

    @property
    def df(self) -> float:
        """Welch-Satterthwaite's degrees of freedom (0 without spread)."""
        a, b = self.vx / self.n, self.vy / self.n
        return 0.0 if a + b == 0 else (a + b) ** 2 / ((a**2 + b**2) / (self.n - 1))

    @property
    def p(self) -> float:
        """Two-sided p of Welch's t (1 without spread)."""
        if self.se == 0 or self.df == 0:
            return 1.0
        return float(2 * stats.t.sf(abs(self.delta) / self.se, self.df))

    def interval(self, level: float) -> tuple[float | None, float | None]:
        """Δ ± the t quantile of the nominal level times se (none without spread)."""
        if self.se == 0 or self.df == 0:
            return None, None
        q = float(stats.t.isf(level / 2, self.df)) * self.se
        return self.delta - q, self.delta + q

    def predictive(self, final: float, design: Adaptive, margin: float | None = None) -> float:
        """Probability under the flat-prior predictive law N(Δ, se² − se_max²) that Δ at max
        passes the final bound (with ``margin``: that the interval at max lies inside it)."""
        v = self.vx + self.vy
        df_max = v**2 / (self.vx**2 + self.vy**2) * (design.max - 1) if v else design.max - 1
        se_max = math.sqrt(v / design.max)
        half = float(stats.t.isf(final / 2, df_max)) * se_max
        law = stats.norm(self.delta, math.sqrt(max(self.se**2 - se_max**2, 1e-12)))
        if margin is None:
            return float(law.sf(half) + law.cdf(-half))
        room = margin - half
        return float(law.cdf(room) - law.cdf(-room)) if room > 0 else 0.0


def welch_at(table: Table, row: str, k: int) -> Welch:
    x, y = table.first(row, k), table.first(table.reference, k)
    return Welch(float(x.mean() - y.mean()), float(x.var(ddof=1)), float(y.var(ddof=1)), k)


def _look(table: Table, rows: list[str], k: int, j: int, family: int, before: int,
          design: Adaptive) -> dict[str, Stop]:  # fmt: skip
    """One look at k seeds (the j-th planned) of the open ``rows``: Holm's step-down at the
    look's levels (``before`` rows separated at earlier looks), equivalence within the margin,
    futile at max or by the predictive probability."""
    nominal = {L: design.levels(L)[0][j] for L in range(1, family + 1)}
    final = {L: design.levels(L)[1] for L in range(1, family + 1)}
    w = {r: welch_at(table, r, k) for r in rows}
    out = {}
    for r in rows:
        lo, hi = w[r].interval(nominal[family])
        out[r] = Stop("open", "", k, w[r].delta, lo, hi)
    for i, r in enumerate(sorted(rows, key=lambda r: w[r].p)):
        if w[r].p > nominal[min(max(family - before - i, 1), family)]:
            break
        out[r] = Stop("separated", "bound", k, *_dlh(out[r]))
    for r in rows:
        s = out[r]
        if s.status != "open":
            continue
        if _inside(s, design.margin):
            out[r] = Stop("equivalent", "bound", k, *_dlh(s))
        elif k >= design.max:
            out[r] = Stop("futile", "max", k, *_dlh(s))
        elif _futile(w[r], final, family, before, design):
            out[r] = Stop("futile", "futility", k, *_dlh(s))
    return out


def _inside(s: Stop, margin: float | None) -> bool:
    """The interval lies inside (-margin, margin)."""
    return margin is not None and s.lo is not None and -margin < s.lo and s.hi < margin


def _futile(w: Welch, final: dict[int, float], family: int, before: int, design: Adaptive) -> bool:
    """A separation at max (and, with a margin, equivalence there) below :data:`FUTILITY`."""
    sep = w.predictive(final[max(family - before, 1)], design)
    eq = 0.0 if design.margin is None else w.predictive(final[family], design, design.margin)
    return sep < FUTILITY and eq < FUTILITY


def _dlh(s: Stop) -> tuple:
    return s.delta, s.lo, s.hi


def replay(table: Table, design: Adaptive) -> dict[str, Stop] | None:
    """The rule played on the table's finished runs, as the docs tell it: each look needs the
    reference and the open rows at the look's seeds; a lost reference seed stops every open row
    ("reference seed failed"), a row's lost seed stops it ("seed failed", out of the family); a
    seed missing otherwise holds the look, its rows open (the budget's where one of the row's
    own seeds is missing and the spec has a budget); rows on the reference's own runs are
    equivalent at the first look played. An open or failed row keeps its last look's Δ. None
    where the design's levels are not committed."""
    ref, compared = table.reference, table.compared
    if any(design.levels(L) is None for L in range(1, max(len(compared), 1) + 1)):
        return None
    stops: dict[str, Stop] = {}
    done: set[str] = set()
    gone: set[str] = set()
    for j, k in enumerate(design.looks):
        active = [r for r in compared if r not in done | gone]
        if table.lost.get(ref, set()) & set(range(k)):
            for r in active:
                stops[r] = _held(stops.get(r), "failed", "reference seed failed", table.has(r, k))
            return stops
        for r in active:
            if table.lost.get(r, set()) & set(range(k)):
                stops[r] = _held(stops.get(r), "failed", "seed failed", table.has(r, k))
                gone.add(r)
        active = [r for r in active if r not in gone]
        if any(table.has(r, k) < k for r in [ref, *active]):
            for r in active:
                mine = design.budget and table.has(r, k) < k
                stops[r] = _held(stops.get(r), "open", "budget" if mine else "", table.has(r, k))
            return stops
        if not active and not done:
            return stops
        before = sum(stops[r].status == "separated" for r in done)
        looked = _look(table, active, k, j, max(len(compared) - len(gone), 1), before, design)
        for r in table.same:
            stops.setdefault(r, Stop("equivalent", "same runs", k, 0.0, 0.0, 0.0))
        stops.update(looked)
        done |= {r for r, s in looked.items() if s.status != "open"}
        if all(s.status != "open" for s in looked.values()):
            return stops
    return stops


def _held(last: Stop | None, status: str, reason: str, seeds: int) -> Stop:
    """A row stopped before its look: its finished seeds, its last look's Δ and interval."""
    return Stop(status, reason, seeds, *(_dlh(last) if last else (None, None, None)))


# -- table1.csv against the runs ---------------------------------------------------------------
@dataclass(frozen=True)
class Shown:
    """An adaptive row of table1.csv: its label, stop (None: no stop shown), the Stopped text
    and the mark."""

    label: str
    stop: Stop | None
    text: str
    significant: bool

    @classmethod
    def of(cls, rec: dict) -> Shown:
        status = _str(rec.get("stop_status"))
        stop = None
        if status:
            seeds = rec.get("stop_seeds")
            stop = Stop(status, _str(rec.get("stop_reason")),
                        -1 if pd.isna(seeds) else int(seeds), _num(rec.get("delta")),
                        _num(rec.get("delta_ci95_lo")), _num(rec.get("delta_ci95_hi")))  # fmt: skip
        mark = str(rec.get("significant")).lower() == "true"
        return cls(str(rec["cell"]), stop, _str(rec.get("stopped")), mark)


def _str(v: object) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _num(v: object) -> float | None:
    return None if v is None or v == "" or pd.isna(v) else float(v)


def _near(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= ROUND)


def row_disagreements(row: Shown, table: Table, design: Adaptive) -> list[str]:
    """What the row's stop must satisfy whatever the rule's bounds (module docstring)."""
    bad = _text_and_mark(row, table)
    s, lab = row.stop, row.label
    lost, ref_lost = table.lost.get(lab, set()), table.lost.get(table.reference, set())
    if lost and lab != table.reference and (s is None or s.status != "failed"):
        bad.append(f"seed {sorted(lost)} failed with no retry left, yet the row reads {_says(s)}")
    if s is None:
        return bad
    if lab in table.same:
        return bad + _same_runs(s)
    if s.status in DECIDED:
        bad += _decided(s, lab, table, design)
    elif s.status in ("open", "failed"):
        bad += _undecided(s, lab, table, design)
    else:
        bad.append(f"unknown stop_status {s.status!r}")
    if s.status == "open" and ref_lost:
        bad.append(f"a reference seed {sorted(ref_lost)} failed, yet the row reads {_says(s)}")
    return bad


def _says(s: Stop | None) -> str:
    return "no stop" if s is None else f"{s.status!r} ({s.reason!r}, {s.seeds} seeds)"


def _text_and_mark(row: Shown, table: Table) -> list[str]:
    """The Stopped text of the stop, ``reference`` for the reference; † only where separated."""
    s = row.stop
    want = s.text() if s else "reference" if row.label == table.reference else ""
    bad = [] if row.text == want else [f"stopped {row.text!r} != {want!r}"]
    if row.label == table.reference and s is not None:
        bad.append(f"the reference has a stop: {_says(s)}")
    if row.significant != (s is not None and s.status == "separated"):
        bad.append(f"significant {row.significant} with stop {_says(s)}")
    return bad


def _same_runs(s: Stop) -> list[str]:
    """A row on the reference's own runs: equivalent by 'same runs', Δ 0 and [0, 0]."""
    if (s.status, s.reason) != ("equivalent", "same runs"):
        return [f"the reference's own runs, yet the row reads {_says(s)}"]
    if not all(_near(v, 0.0) for v in (s.delta, s.lo, s.hi)):
        return [f"the reference's own runs: Δ {s.delta} [{s.lo}, {s.hi}] != 0 [0, 0]"]
    return []


def _decided(s: Stop, lab: str, table: Table, design: Adaptive) -> list[str]:
    """A decided row: at a planned look, exactly that many finished seeds, Δ over them against
    the reference's first as many, and an interval that agrees with the status."""
    bad = []
    mine = len(table.scores.get(lab, {}))
    if s.seeds not in design.looks:
        bad.append(f"{s.status} at {s.seeds} seeds: not a planned look {design.looks}")
    if mine != s.seeds or table.has(lab, s.seeds) != s.seeds:
        bad.append(f"{s.status} at {s.seeds} seeds, yet {mine} seeds finished")
    want = table.delta(lab, s.seeds) if s.seeds > 0 else None
    if want is None or not _near(s.delta, want):
        bad.append(f"delta {s.delta} != the mean over its first {s.seeds} seeds minus the "
                   f"reference's first {s.seeds}: {_fmt(want)}")  # fmt: skip
    if s.delta is not None and s.lo is not None and not s.lo - ROUND <= s.delta <= s.hi + ROUND:
        bad.append(f"delta {s.delta} outside its interval [{s.lo}, {s.hi}]")
    if s.status == "separated":
        bad += _separated(s, table)
    elif s.status == "equivalent":
        bad += _equivalent(s, design)
    elif (s.reason == "max") != (s.seeds == design.max) or s.reason not in ("max", "futility"):
        bad.append(f"futile by {s.reason!r} at {s.seeds} seeds (max {design.max})")
    return bad


def _separated(s: Stop, table: Table) -> list[str]:
    """Separated: an interval; alone in its family (Holm's first test is at α/K, the interval's
    level) it excludes 0 on Δ's side."""
    if s.lo is None or s.hi is None:
        return ["separated without an interval"]
    if len(table.compared) == 1 and (s.lo < 0 < s.hi):
        return [f"separated, yet its interval [{s.lo}, {s.hi}] covers 0"]
    return []


def _equivalent(s: Stop, design: Adaptive) -> list[str]:
    """Equivalent: a margin is set and the interval lies inside it."""
    m = design.margin
    if m is None:
        return ["equivalent without an equivalence margin"]
    if s.lo is None or s.hi is None or s.lo < -m - ROUND or s.hi > m + ROUND:
        return [f"equivalent, yet its interval [{s.lo}, {s.hi}] is not within ±{m}"]
    return []


def _undecided(s: Stop, lab: str, table: Table, design: Adaptive) -> list[str]:
    """Open or failed: every finished seed of the row counted; Δ (if any) a planned look's;
    the reason the failure's or the budget's."""
    bad = []
    mine = len(table.scores.get(lab, {}))
    if s.seeds != mine:
        bad.append(f"{s.status} at {s.seeds} seeds, yet {mine} seeds finished")
    looks = [table.delta(lab, k) for k in design.looks if k <= s.seeds]
    if s.delta is not None and not any(_near(s.delta, d) for d in looks if d is not None):
        bad.append(f"delta {s.delta} is no planned look's Δ ({', '.join(map(_fmt, looks))})")
    lost = {"seed failed": lab, "reference seed failed": table.reference}
    if s.status == "failed" and not table.lost.get(lost.get(s.reason, ""), set()):
        bad.append(f"failed by {s.reason!r}, yet no such seed failed with no retry left")
    if s.status == "open" and s.reason not in ("", "budget"):
        bad.append(f"open for {s.reason!r}")
    if s.status == "open" and not design.budget:
        bad.append("open after the launch ended, and no budget held it")
    if s.reason == "budget" and not design.budget:
        bad.append("left by the budget, yet the spec has none")
    return bad


def _fmt(v: float | None) -> str:
    return "none" if v is None else f"{v:.3f}"


def replay_disagreements(shown: list[Shown], table: Table, design: Adaptive) -> list[str]:
    """Each row's stop against the rule replayed on the runs (no check where the design's
    levels are not committed)."""
    want = replay(table, design)
    if want is None:
        return []
    bad = []
    for row in shown:
        if row.label == table.reference:
            continue
        w, s = want.get(row.label), row.stop
        says = f"{row.label}: the rule gives {_says(w)}, the table {_says(s)}"
        if (w is None) != (s is None):
            bad.append(says)
            continue
        if w is None or s is None:
            continue
        if (w.status, w.reason, w.seeds) != (s.status, s.reason, s.seeds):
            bad.append(says)
        for name in ("delta", "lo", "hi"):
            if not _near(getattr(w, name), getattr(s, name)):
                got, rule = getattr(s, name), _fmt(getattr(w, name))
                bad.append(f"{row.label}: {name} {got} != the rule's {rule}")
    return bad


def stop_disagreements(table1: pd.DataFrame, runs: pd.DataFrame, points: list[str],
                       design: Adaptive, reference: str = "tv/mc") -> list[str]:  # fmt: skip
    """Every adaptive row of ``table1`` (``points``: each row's axis point, as the runs'
    ``point``) whose Stopped column, Δ and interval disagree with the runs (both layers)."""
    tables = tables_of(runs, design, reference)
    groups: dict[tuple, list[Shown]] = {}
    for rec, point in zip(table1.to_dict("records"), points, strict=True):
        if rec["cell"] not in ("base", "total"):
            groups.setdefault((rec["domain"], point), []).append(Shown.of(rec))
    bad = []
    for key, shown in groups.items():
        table = tables.get(key)
        if table is None:
            bad += [f"{r.label} at {key[1]}: {_says(r.stop)} and no run" for r in shown if r.stop]
            continue
        for row in shown:
            bad += [f"{row.label} at {key[1]}: {m}" for m in row_disagreements(row, table, design)]
        bad += [f"at {key[1]}: {m}" for m in replay_disagreements(shown, table, design)]
    return bad
