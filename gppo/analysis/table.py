"""Table 1 as data: rows, displayed numbers, ranks and footnotes, independent of the output format.

Numbers follow the paper (Table 1, §4.2):
- scores in percent with ``precision`` decimals (default 1), rounded half-up in exact decimal
  arithmetic (``Decimal(repr(score))``, never float ``round``);
- Avg = mean of the benchmark scores (exact), rounded half-up at the displayed precision
  (27.65 -> 27.7);
- relative change = (Avg - Avg_ref) / Avg_ref from the *displayed* averages, two decimals
  (41.5 vs 27.7 -> +49.82%);
- several seeds: mean over seeds ± half-width of the 95% t interval (n - 1 degrees of freedom);
  the Avg entry is the mean ± CI of the per-seed averages (seeds with every benchmark only);
- ranks: per column, among all rows but the base model, by the displayed mean, highest first,
  competition ranking (ties share a rank, the next rank is skipped: 1, 1, 3); ranks 1-3 are
  highlighted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

import pandas as pd

from gppo.analysis.tidy import BASE, STATUSES

DIV_ORDER = ("tv", "hellinger", "chi2", "kl")
EST_ORDER = ("mc", "binary", "atomic")
BASELINE_ORDER = ("gspo", "gmpo", "sapo", "cispo", "clip_cov")
#: Known methods named beside their cell, as in the paper's Table 1.
KNOWN_METHODS = {"tv/mc": "GRPO", "kl/mc": "DAPO", "tv/binary": "DPPO", "chi2/atomic": "RIPO"}
DIV_NAMES = {
    "tv": "TV",
    "chi2": "χ²",
    "kl": "KL",
    "hellinger": "Hellinger",
    "rkl": "RKL",
    "js": "JS",
}
EST_NAMES = {"mc": "MC", "atomic": "Atomic", "binary": "Binary"}
BASELINE_NAMES = {
    "gspo": "GSPO",
    "gmpo": "GMPO",
    "sapo": "SAPO",
    "cispo": "CISPO",
    "clip_cov": "Clip-Cov",
}
OTHER_BASELINES = "Other baselines"
BASE_MODEL = "Base model"
AVG = "avg"
REASON_TEXT = {"failed": "run failed", "running": "still running", "missing": "no run (missing)"}


@dataclass(frozen=True)
class Entry:
    """One displayed number: mean (percent, quantized), CI half-width, seeds, rank (1-3) or reason."""

    mean: Decimal | None
    ci: Decimal | None = None
    n: int = 0
    rank: int | None = None
    reason: str | None = None  # failed | running | missing, when mean is None

    def text(self, pm: str = "±") -> str:
        if self.mean is None:
            return "—"
        return f"{self.mean} {pm} {self.ci}" if self.ci is not None else str(self.mean)


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
    blocks: list[Block]
    footnotes: list[Footnote]
    multi_seed: bool
    precision: int
    reference: str
    k: int | None = None

    def mark(self, reason: str | None) -> str:
        return next((f.mark for f in self.footnotes if f.reason == reason), "")


def pct(score: float) -> Decimal:
    """A fraction as an exact decimal percent (0.346 -> Decimal('34.600'))."""
    return Decimal(repr(float(score))) * 100


def quantize(value: Decimal, places: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def relative_pct(avg: Decimal, ref: Decimal) -> Decimal:
    """(avg - ref) / ref in percent, two decimals half-up, from the displayed averages."""
    return quantize((avg - ref) / ref * 100, 2)


def t_halfwidth(values: Sequence[Decimal], confidence: float = 0.95) -> float:
    """Half-width of the two-sided t confidence interval of the mean."""
    from scipy.special import stdtrit  # t quantile; far lighter to import than scipy.stats

    n = len(values)
    data = [float(v) for v in values]
    mean = sum(data) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in data) / (n - 1))
    return float(stdtrit(n - 1, 0.5 + confidence / 2)) * sd / math.sqrt(n)


def summarise(values: Sequence[Decimal], precision: int, confidence: float = 0.95) -> Entry:
    """Mean (and CI for n > 1) of per-seed percents, as displayed."""
    n = len(values)
    mean = quantize(sum(values, Decimal(0)) / n, precision)
    ci = None
    if n > 1:
        ci = quantize(Decimal(repr(t_halfwidth(values, confidence))), precision)
    return Entry(mean=mean, ci=ci, n=n)


def _row_kind(cell: str) -> tuple[str, str]:
    if cell == BASE:
        return "base", BASE_MODEL
    if "/" in cell:
        return "grid", cell.split("/", 1)[0]
    return "baseline", OTHER_BASELINES


def _order_key(cell: str, first_seen: Mapping[str, int]) -> tuple:
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


def _rank(rows: list[Row], column: str) -> None:
    values = [
        r.entries[column].mean
        for r in rows
        if r.kind != "base" and r.entries[column].mean is not None
    ]
    for row in rows:
        entry = row.entries[column]
        if row.kind == "base" or entry.mean is None:
            continue
        rank = 1 + sum(v > entry.mean for v in values)
        if rank <= 3:
            row.entries[column] = Entry(entry.mean, entry.ci, entry.n, rank, entry.reason)


@dataclass
class _CellData:
    scores: dict[int, dict[str, Decimal]] = field(default_factory=dict)  # seed -> benchmark -> %
    statuses: dict[int, set[str]] = field(default_factory=dict)  # seed -> statuses seen


def _gather(tidy: pd.DataFrame) -> dict[str, tuple[dict[str, _CellData], list[str]]]:
    """One pass over the tidy rows: per domain, the cells (in order of appearance) and benchmarks."""
    out: dict[str, tuple[dict[str, _CellData], list[str]]] = {}
    columns = [tidy[c].tolist() for c in ("domain", "cell", "benchmark", "seed", "score", "status")]
    for domain, cell, bench, seed, score, status in zip(*columns, strict=True):
        cells, benches = out.setdefault(domain, ({}, []))
        data = cells.setdefault(cell, _CellData())
        seed = int(seed)
        data.statuses.setdefault(seed, set()).add(status)
        if status == "finished" and score == score and bench:  # score == score: not NaN
            data.scores.setdefault(seed, {})[bench] = pct(score)
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
            status = next((s for s in STATUSES[1:] if s in data.statuses[seed]), "missing")
            reasons.setdefault(status, []).append(seed)
    row_reason = next(iter(reasons), None) if not per_seed else None
    entries: dict[str, Entry] = {}
    for b in benchmarks:
        values = [scores[b] for scores in per_seed.values() if b in scores]
        if per_seed and not values:  # ran, but never logged this benchmark
            seeds = reasons.setdefault("missing", [])
            seeds.extend(s for s in per_seed if s not in seeds)
        entries[b] = (
            summarise(values, precision, conf)
            if values
            else Entry(None, reason=row_reason or "missing")
        )
    avgs = [
        sum((s[b] for b in benchmarks), Decimal(0)) / len(benchmarks)
        for s in per_seed.values()
        if all(b in s for b in benchmarks)
    ]
    entries[AVG] = (
        summarise(avgs, precision, conf) if avgs else Entry(None, reason=row_reason or "missing")
    )
    return Row(domain, cell, group, kind, entries, None, len(per_seed), reasons)


def build_table1(
    tidy: pd.DataFrame,
    *,
    reference: str = "tv/mc",
    benchmarks: Mapping[str, Sequence[str]] | None = None,
    precision: int = 1,
    confidence: float = 0.95,
    k: int | None = None,
) -> Table1:
    """Build Table 1 from the tidy frame (gppo/analysis/tidy.py), one block per domain.

    ``benchmarks`` optionally fixes each domain's column order (default: order of appearance).
    """
    blocks: list[Block] = []
    for domain, (cells, seen) in _gather(tidy).items():
        cols = list(benchmarks[domain]) if benchmarks and domain in benchmarks else []
        cols += [b for b in seen if b not in cols]
        first_seen: dict[str, int] = {}
        for cell in cells:
            if "/" in cell:
                first_seen.setdefault(cell.split("/", 1)[0], len(first_seen))
        order = sorted(cells, key=lambda c: _order_key(c, first_seen))
        rows = [_build_row(domain, c, cells[c], cols, precision, confidence) for c in order]
        ref_row = next((r for r in rows if r.cell == reference), None)
        ref_avg = ref_row.entries[AVG].mean if ref_row else None
        for row in rows:
            avg = row.entries[AVG].mean
            if avg is not None and ref_avg:
                row.rel_pct = relative_pct(avg, ref_avg)
        for column in [*cols, AVG]:
            _rank(rows, column)
        blocks.append(Block(domain, cols, rows, reference, ref_avg))
    multi = any(r.n_seeds > 1 for b in blocks for r in b.rows)
    return Table1(blocks, _footnotes(blocks), multi, precision, reference, k)


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
        notes.append(Footnote("abc"[i], reason, text))
    return notes
