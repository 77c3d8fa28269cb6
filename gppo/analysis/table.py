"""Table 1 as data: rows, displayed numbers, ranks and footnotes, independent of the output format.

Numbers follow the paper (Table 1, §4.2):
- scores in percent with ``precision`` decimals (default 1), rounded half-up in exact decimal
  arithmetic (``Decimal(repr(score))``, never float ``round``);
- Avg = mean of the benchmark scores (exact), rounded half-up at the displayed precision
  (27.65 -> 27.7);
- relative change = (Avg - Avg_ref) / Avg_ref from the *displayed* averages, two decimals
  (41.5 vs 27.7 -> +49.82%);
- several seeds (gppo/analysis/stats.py): mean over seeds [95% Student t CI]; the Avg entry is
  the mean of the per-seed averages ``a_s = (1/B) Σ_b x_sb`` (seeds with every benchmark only;
  the others are named in a footnote) with the t CI of that mean (the run is the unit: a run is
  scored on every benchmark, so its scores stay together); Δ = Avg - Avg_ref in points with the
  t CI of ``mean(a) - mean(a_ref)`` on the variance of the test below (pooled, or Welch's), so
  it excludes 0 where the uncorrected test rejects; the probability of improvement P(cell > ref)
  (Mann-Whitney U / nm, averaged over benchmarks); a t-test of the per-seed averages against
  the reference (``test="pooled"``, the default: the within-cell variance pooled over the block's
  trained rows; ``"welch"``: Welch's), corrected over the rows of the block (Benjamini-Hochberg by
  default), ``significant`` when the adjusted p <= ``alpha``;
- ranks: per column, among all rows but the base model, by the displayed mean, highest first,
  competition ranking (ties share a rank, the next rank is skipped: 1, 1, 3). ``highlight=
  "separated"`` (default) marks ranks 1-3 only where the data separate them: entries whose CIs
  do not separate them share a rank, and an entry is marked only if its CI and those above it
  lie above the CIs of every entry below it (:func:`gppo.analysis.stats.separated_ranks`; one
  seed: nothing is highlighted); ``"ranks"`` highlights ranks 1-3 regardless (the paper's
  typography).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

import pandas as pd

from gppo.analysis import stats as S
from gppo.analysis.cost import TableCost, table_cost
from gppo.analysis.tidy import ALIAS_CELLS, BASE, BASELINES, STATUSES
from gppo.objectives.defaults import REFERENCE
from gppo.registry import LazyMapping
from gppo.scores import pct, quantize
from gppo.store.cost import Price
from gppo.store.state import State

#: Row order of the divergences and estimators: the paper's Table 1 display order (TV, Hellinger,
#: χ², KL; MC, Binary, Atomic), a deliberate choice that differs from the registries' order.
DIV_ORDER = ("tv", "hellinger", "chi2", "kl")
EST_ORDER = ("mc", "binary", "atomic")
BASELINE_ORDER = BASELINES  # the method registry's order, which is the paper's


def _display_names() -> dict[str, dict[str, str]]:
    """Each registry's display names (the one vocabulary: :mod:`gppo.objectives`), by name."""
    from gppo.objectives.divergences import DIVERGENCES, get_divergence
    from gppo.objectives.estimators import ESTIMATORS
    from gppo.objectives.methods import METHODS

    return {
        "divergence": {n: get_divergence(n).display for n in DIVERGENCES.names()},
        "estimator": {n: ESTIMATORS.get(n).display for n in ESTIMATORS.names()},
        "method": {n: METHODS.get(n).display for n in METHODS.names()},
    }


_NAMES: Mapping[str, dict[str, str]] = LazyMapping(_display_names)
#: display names, read from the registries on first use: divergences (``chi2`` -> ``χ²``;
#: ``alpha:<a>``: :func:`gppo.analysis.render.divergence_name`), estimators, baselines
DIV_NAMES: Mapping[str, str] = LazyMapping(lambda: _NAMES["divergence"])
EST_NAMES: Mapping[str, str] = LazyMapping(lambda: _NAMES["estimator"])
BASELINE_NAMES: Mapping[str, str] = LazyMapping(lambda: {b: _NAMES["method"][b] for b in BASELINES})
#: Known methods named beside their cell, as in the paper's Table 1: the aliases (tv/mc -> GRPO).
KNOWN_METHODS: Mapping[str, str] = LazyMapping(
    lambda: {c: _NAMES["method"][m] for m, c in ALIAS_CELLS.items()}
)
OTHER_BASELINES = "Other baselines"
BASE_MODEL = "Base model"
AVG = "avg"
HIGHLIGHTS = ("separated", "ranks", "none")
#: why an entry has no result, by the status of its runs (footnotes in STATUSES order)
REASON_TEXT = {
    State.FAILED.value: "run failed",
    State.STOPPED.value: "run stopped",
    State.RUNNING.value: "still running",
    State.PENDING.value: "no run (missing)",
}
#: a result was logged, but not for this benchmark: as if it had no run
NO_RUN = State.PENDING.value
#: a seed with results, but not on every benchmark: in its benchmarks' columns, left out of Avg.,
#: Δ and the test (footnoted after the STATUSES reasons)
INCOMPLETE = "incomplete"
#: a row and the reference compared, but without spread between seeds: not tested (footnoted)
NO_SPREAD = "no_spread"
#: a row whose runs are another row's (an identical cell's, gppo.grid.sharing): footnoted
SAME_RUNS = "same_runs"


@dataclass(frozen=True)
class Entry:
    """One displayed number: mean (percent, quantized), 95% CI bounds, seeds, rank (1-3), reason."""

    mean: Decimal | None
    lo: Decimal | None = None
    hi: Decimal | None = None
    n: int = 0
    rank: int | None = None
    reason: str | None = None  # failed | stopped | running | pending, when mean is None

    def text(self) -> str:
        if self.mean is None:
            return "—"
        return f"{self.mean} [{self.lo}, {self.hi}]" if self.lo is not None else str(self.mean)

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.lo is None or self.hi is None else (float(self.lo), float(self.hi))


@dataclass
class Row:
    domain: str
    cell: str  # tidy id: kl/atomic, gspo, base
    group: str  # divergence id, OTHER_BASELINES or BASE_MODEL
    kind: str  # grid | baseline | base
    entries: dict[str, Entry]  # benchmark -> entry, plus AVG
    rel_pct: Decimal | None
    n_seeds: int
    reasons: dict[str, list[int]] = field(default_factory=dict)  # reason -> seeds without result
    lacking: dict[int, list[str]] = field(default_factory=dict)  # seed -> benchmarks it lacks
    delta: Entry = field(default_factory=lambda: Entry(None))  # Avg - Avg_ref, points, CI
    p_improve: float | None = None  # P(cell > reference) over seeds and benchmarks
    p_value: float | None = None  # t-test (Table1.test) of the per-seed averages vs the reference
    p_adjusted: float | None = None  # after the correction over the block's rows
    significant: bool = False
    no_spread: bool = False  # >= 2 seeds each, but no variance to test against: not tested
    columns: dict[str, list[float]] = field(default_factory=dict, repr=False)  # bench -> seeds
    complete: dict[str, list[float]] = field(default_factory=dict, repr=False)  # full seeds only
    seed_avgs: list[float] = field(default_factory=list, repr=False)
    #: the run ids of its results; ``shares``: the same, when another row shows the same runs
    runs: frozenset[str] = field(default_factory=frozenset, repr=False)
    shares: frozenset[str] | None = field(default=None, repr=False)
    same_runs: str | None = None  # the earlier row whose runs these are (its cell)

    @property
    def estimator(self) -> str | None:
        return self.cell.split("/", 1)[1] if self.kind == "grid" else None


@dataclass
class Block:
    domain: str
    benchmarks: list[str]
    rows: list[Row]
    reference: str
    reference_avg: Decimal | None


@dataclass
class Footnote:
    mark: str
    reason: str
    text: str


@dataclass
class Table1:
    """Table 1 as displayed: one :class:`Block` per domain (rows of cells, columns of
    benchmarks and Avg.), its footnotes (why an entry is marked), and how it was computed
    (``multi_seed``: entries are seed means with CIs; ``test``/``correction``/``alpha``: the
    significance test against ``reference``; ``highlight``: what is bolded). Render it with
    :func:`gppo.analysis.render.render` (md, latex, html, csv)."""

    blocks: list[Block]
    footnotes: list[Footnote]
    multi_seed: bool
    precision: int
    reference: str
    k: int | None = None
    highlight: str = "separated"
    alpha: float = S.ALPHA
    correction: str = "bh"
    confidence: float = S.CONFIDENCE
    test: str = "pooled"
    #: the cost column (gppo.analysis.cost); None when no run logged a cost
    cost: TableCost | None = None
    #: the comparisons corrected together when more than this table's (a sweep with axes:
    #: every point's, :func:`gppo.analysis.axes.recorrect`), as the † note names them
    family: str | None = None

    def mark(self, reason: str | None) -> str:
        return next((f.mark for f in self.footnotes if f.reason == reason), "")


def relative_pct(avg: Decimal, ref: Decimal) -> Decimal:
    """(avg - ref) / ref in percent, two decimals half-up, from the displayed averages."""
    return quantize((avg - ref) / ref * 100, 2)


def _dec(value: float | None, precision: int) -> Decimal | None:
    return None if value is None else quantize(Decimal(repr(float(value))), precision)


def summarise(
    values: Sequence[Decimal],
    precision: int,
    confidence: float = S.CONFIDENCE,
    interval: tuple[float, float] | None = None,
) -> Entry:
    """Mean of per-seed percents and its CI (``interval``, else the t CI for n > 1)."""
    n = len(values)
    mean = quantize(sum(values, Decimal(0)) / n, precision)
    if interval is None and n > 1:
        interval = S.mean_ci([float(v) for v in values], confidence)
    if interval is None:
        return Entry(mean=mean, n=n)
    return Entry(mean, _dec(interval[0], precision), _dec(interval[1], precision), n)


def _row_kind(cell: str) -> tuple[str, str]:
    if cell == BASE:
        return "base", BASE_MODEL
    if "/" in cell:
        return "grid", cell.split("/", 1)[0]
    return "baseline", OTHER_BASELINES


def row_order(cells: Iterable[str]) -> list[str]:
    """``cells`` (tidy ids) in Table 1's row order, the one order of every table and figure of the
    report: grid cells by divergence (:data:`DIV_ORDER`, then the others in the order they first
    appear in ``cells``), then estimator (:data:`EST_ORDER`, then by name); the baselines (the
    method registry's order, then by name); the base model last."""
    cells = list(dict.fromkeys(cells))
    first_seen: dict[str, int] = {}
    for cell in cells:
        if _row_kind(cell)[0] == "grid":
            first_seen.setdefault(cell.split("/", 1)[0], len(first_seen))

    def key(cell: str) -> tuple:
        kind, _ = _row_kind(cell)
        if kind == "grid":
            div, est = cell.split("/", 1)
            d = DIV_ORDER.index(div) if div in DIV_ORDER else len(DIV_ORDER)
            e = EST_ORDER.index(est) if est in EST_ORDER else len(EST_ORDER)
            return (0, d, first_seen[div], e, est)
        if kind == "baseline":
            b = BASELINE_ORDER.index(cell) if cell in BASELINE_ORDER else len(BASELINE_ORDER)
            return (1, b, 0, 0, cell)
        return (2, 0, 0, 0, cell)

    return sorted(cells, key=key)


def _rank(rows: list[Row], column: str) -> None:
    values = [
        mean for r in rows if r.kind != "base" and (mean := r.entries[column].mean) is not None
    ]
    for row in rows:
        entry = row.entries[column]
        mean = entry.mean
        if row.kind == "base" or mean is None:
            continue
        rank = 1 + sum(v > mean for v in values)
        if rank <= 3:
            row.entries[column] = replace(entry, rank=rank)


def _rank_separated(rows: list[Row], column: str) -> None:
    ranked = [r for r in rows if r.kind != "base"]
    means = [None if (m := r.entries[column].mean) is None else float(m) for r in ranked]
    found = S.separated_ranks(means, [r.entries[column].interval for r in ranked])
    for row, rank in zip(ranked, found, strict=True):
        if rank is not None:
            row.entries[column] = replace(row.entries[column], rank=rank)


@dataclass
class _CellData:
    scores: dict[int, dict[str, Decimal]] = field(default_factory=dict)  # seed -> benchmark -> %
    statuses: dict[int, set[str]] = field(default_factory=dict)  # seed -> statuses seen
    runs: set[str] = field(default_factory=set)  # the runs of its results (tidy ``run_id``)


def _gather(tidy: pd.DataFrame) -> dict[str, tuple[dict[str, _CellData], list[str]]]:
    """One pass over the tidy rows: per domain, the cells (in order of appearance) and benchmarks."""
    out: dict[str, tuple[dict[str, _CellData], list[str]]] = {}
    columns = [tidy[c].tolist() for c in ("domain", "cell", "benchmark", "seed", "score", "status")]
    columns.append(tidy["run_id"].tolist() if "run_id" in tidy else [None] * len(tidy))
    for domain, cell, bench, seed, score, status, run in zip(*columns, strict=True):
        cells, benches = out.setdefault(domain, ({}, []))
        data = cells.setdefault(cell, _CellData())
        seed = int(seed)
        data.statuses.setdefault(seed, set()).add(status)
        if status == State.DONE and score == score and bench:  # score == score: not NaN
            data.scores.setdefault(seed, {})[bench] = pct(score)
            if isinstance(run, str) and run:
                data.runs.add(run)
            if bench not in benches:
                benches.append(bench)
    return out


def _build_row(
    domain: str, cell: str, data: _CellData, benchmarks: list[str], precision: int, conf: float
) -> Row:
    kind, group = _row_kind(cell)
    per_seed = {seed: data.scores[seed] for seed in sorted(data.scores)}
    reasons: dict[str, list[int]] = {}
    for seed in sorted(data.statuses):
        if seed not in per_seed:
            status = next((s for s in STATUSES[1:] if s in data.statuses[seed]), NO_RUN)
            reasons.setdefault(status, []).append(seed)
    row_reason = next(iter(reasons), None) if not per_seed else None
    entries: dict[str, Entry] = {}
    columns: dict[str, list[float]] = {}
    for b in benchmarks:
        values = [scores[b] for scores in per_seed.values() if b in scores]
        if per_seed and not values:  # ran, but never logged this benchmark
            seeds = reasons.setdefault(NO_RUN, [])
            seeds.extend(s for s in per_seed if s not in seeds)
        columns[b] = [float(v) for v in values]
        entries[b] = (
            summarise(values, precision, conf)
            if values
            else Entry(None, reason=row_reason or NO_RUN)
        )
    full = [s for s in per_seed.values() if all(b in s for b in benchmarks)]
    lacking = {  # seeds with results but not on every benchmark: left out of Avg., Δ, the test
        seed: [b for b in benchmarks if b not in scores and columns[b]]
        for seed, scores in per_seed.items()
    }
    lacking = {seed: benches for seed, benches in lacking.items() if benches}
    if lacking:
        reasons[INCOMPLETE] = list(lacking)
    avgs = [sum((s[b] for b in benchmarks), Decimal(0)) / len(benchmarks) for s in full]
    complete = {b: [float(s[b]) for s in full] for b in benchmarks}
    # the run is the unit: the t CI of the mean of the per-seed averages (summarise: S.mean_ci)
    entries[AVG] = (
        summarise(avgs, precision, conf) if avgs else Entry(None, reason=row_reason or NO_RUN)
    )
    row = Row(domain, cell, group, kind, entries, None, len(per_seed), reasons, lacking)
    row.columns, row.complete, row.seed_avgs = columns, complete, [float(a) for a in avgs]
    row.runs = frozenset(data.runs)
    return row


def _mark_same_runs(rows: list[Row]) -> None:
    """Rows that show the same runs (tidy ``run_id``: a cell served by an identical cell's runs
    carries its source's): each later one is marked with the first one's cell."""
    first: dict[frozenset[str], Row] = {}
    for row in rows:
        if row.kind == "base" or not row.runs:
            continue
        owner = first.setdefault(row.runs, row)
        if owner is not row:
            row.same_runs, row.shares, owner.shares = owner.cell, row.runs, row.runs


def _pool_key(row: Row) -> tuple:
    """What the pooled variance counts once: the runs of rows that show the same runs, else the
    per-seed averages (exact duplicates from data without run ids, e.g. a CSV)."""
    return ("runs", row.shares) if row.shares else ("values", tuple(row.seed_avgs))


def _compare(rows: list[Row], ref: Row, benchmarks: list[str], table: Table1) -> None:
    """Δ, its CI, P(row > ref) and the corrected test of every row against the reference."""
    tested: list[Row] = []
    # the pooled test's groups: the distinct trained rows (not the base model, not exact
    # duplicates); Δ's CI uses the same variance as the test (Welch's when test="welch")
    pool = (
        None
        if table.test == "welch"
        else list({_pool_key(r): r.seed_avgs for r in rows if r.kind != "base"}.values())
    )
    for row in rows:
        if not benchmarks:
            continue
        row.p_improve = S.probability_of_improvement(
            [row.columns[b] for b in benchmarks], [ref.columns[b] for b in benchmarks]
        )
        avg, ref_avg = row.entries[AVG].mean, ref.entries[AVG].mean
        if row is ref or avg is None or ref_avg is None:
            continue
        point = sum(row.seed_avgs) / len(row.seed_avgs) - sum(ref.seed_avgs) / len(ref.seed_avgs)
        ci = S.delta_ci(row.seed_avgs, ref.seed_avgs, table.confidence, pool)
        lo, hi = (None, None) if ci is None else ci
        row.delta = Entry(
            _dec(point, table.precision),
            _dec(lo, table.precision),
            _dec(hi, table.precision),
            n=len(row.seed_avgs),
        )
        tested.append(row)
    if pool is None:
        pvalues = [S.welch_pvalue(r.seed_avgs, ref.seed_avgs) for r in tested]
    else:
        pvalues = S.pooled_pvalues([r.seed_avgs for r in tested], ref.seed_avgs, pool)
    for row, p in zip(tested, pvalues, strict=True):
        row.p_value = p
        row.no_spread = p is None and len(row.seed_avgs) > 1 and len(ref.seed_avgs) > 1
    tested = [r for r in tested if r.p_value is not None]
    adjusted = S.adjust([r.p_value for r in tested], table.correction)  # type: ignore[misc]  # p_value: not None
    for row, p in zip(tested, adjusted, strict=True):
        row.p_adjusted = float(p)
        row.significant = bool(p <= table.alpha)


def build_table1(
    tidy: pd.DataFrame,
    *,
    reference: str = REFERENCE,
    benchmarks: Mapping[str, Sequence[str]] | None = None,
    precision: int = 1,
    confidence: float = S.CONFIDENCE,
    k: int | None = None,
    highlight: str = "separated",
    alpha: float = S.ALPHA,
    correction: str = "bh",
    test: str = "pooled",
    price: Price | None = None,
) -> Table1:
    """Build Table 1 from the tidy frame (gppo/analysis/tidy.py), one block per domain.

    ``benchmarks`` optionally fixes each domain's column order (default: order of appearance).
    ``highlight``: ``separated`` | ``ranks`` | ``none``; ``correction``: ``bh`` | ``holm``;
    ``test``: ``pooled`` (pooled within-cell variance) | ``welch``; ``price``: the spec's
    ``cost:`` (the cost column in money).
    """
    if test not in S.TESTS:
        raise ValueError(f"unknown test {test!r}; allowed: {', '.join(S.TESTS)}")
    if highlight not in HIGHLIGHTS:
        raise ValueError(f"unknown highlight {highlight!r}; allowed: {', '.join(HIGHLIGHTS)}")
    if correction not in S.CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; allowed: {', '.join(S.CORRECTIONS)}")
    table = Table1(
        [], [], False, precision, reference, k, highlight, alpha, correction, confidence, test
    )
    for domain, (cells, seen) in _gather(tidy).items():
        cols = list(benchmarks[domain]) if benchmarks and domain in benchmarks else []
        cols += [b for b in seen if b not in cols]
        order = row_order(cells)
        rows = [_build_row(domain, c, cells[c], cols, precision, confidence) for c in order]
        _mark_same_runs(rows)
        ref_row = next((r for r in rows if r.cell == reference), None)
        ref_avg = ref_row.entries[AVG].mean if ref_row else None
        for row in rows:
            avg = row.entries[AVG].mean
            if avg is not None and ref_avg:
                row.rel_pct = relative_pct(avg, ref_avg)
        if ref_row is not None:
            _compare(rows, ref_row, cols, table)
        for column in [*cols, AVG]:
            if highlight == "ranks":
                _rank(rows, column)
            elif highlight == "separated":
                _rank_separated(rows, column)
        table.blocks.append(Block(domain, cols, rows, reference, ref_avg))
    table.multi_seed = any(r.n_seeds > 1 for b in table.blocks for r in b.rows)
    table.footnotes = _footnotes(table.blocks)
    table.cost = table_cost(tidy, price)
    return table


def _footnotes(blocks: list[Block]) -> list[Footnote]:
    found: dict[str, list[str]] = {}
    for block in blocks:
        for row in block.rows:
            for reason, seeds in row.reasons.items():
                where = f"{row.cell} ({block.domain}, seed{'s' if len(seeds) > 1 else ''} "
                found.setdefault(reason, []).append(where + ", ".join(map(str, seeds)) + ")")
    notes = []
    for i, reason in enumerate(r for r in STATUSES if r in found):
        text = f"no result, {REASON_TEXT[reason]}: " + "; ".join(found[reason])
        notes.append(Footnote("abcd"[i], reason, text))
    left = [
        f"{row.cell} ({block.domain}, "
        + "; ".join(f"seed {s} lacks {', '.join(b)}" for s, b in row.lacking.items())
        + ")"
        for block in blocks
        for row in block.rows
        if row.lacking
    ]
    if left:
        text = "left out of Avg., Δ and the test (no score on every benchmark): " + "; ".join(left)
        notes.append(Footnote("abcdef"[len(notes)], INCOMPLETE, text))
    same = [f"{r.cell} = {r.same_runs} ({b.domain})" for b in blocks for r in b.rows if r.same_runs]
    if same:
        text = (
            "the same runs as the row named (an identical cell: the same function at its δ, "
            "one run a seed serves both; counted once in the pooled variance): "
        )
        notes.append(Footnote("abcdefg"[len(notes)], SAME_RUNS, text + "; ".join(same)))
    flat = [f"{r.cell} ({b.domain})" for b in blocks for r in b.rows if r.no_spread]
    if flat:
        text = "not tested: no spread between seeds (identical seeds are not replicates): "
        notes.append(Footnote("abcdef"[len(notes)], NO_SPREAD, text + "; ".join(flat)))
    return notes
