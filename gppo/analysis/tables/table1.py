"""Table 1 built from the tidy scores: rows, displayed numbers, ranks and footnotes, independent of the
output format (its types: :mod:`.table1_model`; its order and names: :mod:`gppo.analysis.vocabulary`).

Numbers follow the paper (Table 1, §4.2):
- scores in percent with ``precision`` decimals (default 1), rounded half-up in exact decimal
  arithmetic (``Decimal(repr(score))``, never float ``round``);
- Avg = mean of the benchmark scores (exact), rounded half-up at the displayed precision
  (27.65 -> 27.7);
- relative change = (Avg - Avg_ref) / Avg_ref from the *displayed* averages, two decimals
  (41.5 vs 27.7 -> +49.82%);
- several seeds (gppo/stats/inference.py): mean over seeds [95% Student t CI]; the Avg entry is
  the mean of the per-seed averages ``a_s = (1/B) Σ_b x_sb`` (seeds with every benchmark only;
  the others are named in a footnote) with the t CI of that mean (the run is the unit: a run is
  scored on every benchmark, so its scores stay together); Δ = Avg - Avg_ref in points with the
  t CI of ``mean(a) - mean(a_ref)`` on the variance of the test below (pooled, or Welch's), so
  it excludes 0 where the uncorrected test rejects; the probability of improvement P(cell > ref)
  (Mann-Whitney U / nm, averaged over benchmarks); a t-test of the per-seed averages against
  the reference (``test="welch"``, the default: the row's and the reference's own seed
  variances, Welch-Satterthwaite df; ``"pooled"``: the within-cell variance pooled over the
  block's trained rows, which assumes equal seed variances), corrected over the rows of the block (Benjamini-Hochberg by
  default), ``significant`` when the adjusted p <= ``alpha``;
- ranks: per column, among all rows but the base model, by the displayed mean, highest first,
  competition ranking (ties share a rank, the next rank is skipped: 1, 1, 3). ``highlight=
  "separated"`` (default) marks ranks 1-3 only where the data separate them: entries whose CIs
  do not separate them share a rank, and an entry is marked only if its CI and those above it
  lie above the CIs of every entry below it (:func:`gppo.stats.inference.separated_ranks`; one
  seed: nothing is highlighted); ``"ranks"`` highlights ranks 1-3 regardless (the paper's
  typography).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

import pandas as pd

from gppo.analysis.data.tidy import STATUSES
from gppo.analysis.tables.cost_column import table_cost
from gppo.analysis.tables.table1_model import (
    AVG,
    HIGHLIGHTS,
    INCOMPLETE,
    NO_RUN,
    NO_SPREAD,
    REASON_TEXT,
    SAME_RUNS,
    Block,
    Entry,
    Footnote,
    Row,
    Table1,
)
from gppo.analysis.vocabulary import row_kind, row_order
from gppo.objectives.defaults import REFERENCE
from gppo.score_format import pct, quantize
from gppo.stats import inference as S
from gppo.store.cost import Price
from gppo.store.state import State


def relative_pct(avg: Decimal, ref: Decimal) -> Decimal:
    """(avg - ref) / ref in percent, two decimals half-up, from the displayed averages."""
    return quantize((avg - ref) / ref * 100, 2)


def decimal_of(value: float | None, precision: int) -> Decimal | None:
    """``value`` as a Decimal rounded half up to ``precision`` places (None stays None)."""
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
    return Entry(mean, decimal_of(interval[0], precision), decimal_of(interval[1], precision), n)


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
    kind, group = row_kind(cell)
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
            decimal_of(point, table.precision),
            decimal_of(lo, table.precision),
            decimal_of(hi, table.precision),
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
    family = comparison_family(tested, ref)
    adjusted = S.adjust([f[0].p_value for f in family], table.correction)  # type: ignore[misc]  # p_value: not None
    for rows_, p in zip(family, adjusted, strict=True):
        for row in rows_:
            row.p_adjusted = float(p)
            row.significant = bool(p <= table.alpha)
    for row in tested:  # outside the family: the base model, tested on its own
        if row.p_adjusted is None and row.kind == "base":
            row.p_adjusted = row.p_value
            row.significant = bool(row.p_value <= table.alpha)  # type: ignore[operator]  # tested: p_value not None


def comparison_family(tested: Sequence[Row], ref: Row) -> list[list[Row]]:
    """Table 1's correction family of one block (one domain at one axis point), the adaptive
    rule's too (issue 58): the trained rows compared with the reference, each comparison once.
    A row that shows the reference's own runs (``chi2/mc`` = ``tv/mc``) is no comparison and
    is left out; rows that show the same runs as each other are one comparison (one entry, its
    rows together); the base model's row is not a method compared with the reference and is
    tested on its own, outside the family."""
    groups: dict[object, list[Row]] = {}
    for row in tested:
        if row.kind == "base" or (ref.shares and row.shares == ref.shares):
            continue
        groups.setdefault(_pool_key(row), []).append(row)
    return list(groups.values())


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
    test: str = S.DEFAULT_TEST,
    price: Price | None = None,
) -> Table1:
    """Build Table 1 from the tidy frame (gppo/analysis/data/tidy.py), one block per domain.

    ``benchmarks`` optionally fixes each domain's column order (default: order of appearance).
    ``highlight``: ``separated`` | ``ranks`` | ``none``; ``correction``: ``bh`` | ``holm``;
    ``test``: ``welch`` (the default: each comparison's own variances) | ``pooled`` (the
    within-cell variance pooled over the block's rows); ``price``: the spec's
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
