"""Table 1's data model, independent of how it is built (:mod:`.table1`) or rendered
(:mod:`.render`): an entry (mean, CI, rank), a row, a block of rows, a footnote, the table; the
reasons an entry has no result."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from gppo.analysis.tables.cost_column import TableCost
from gppo.stats import inference as S
from gppo.store.state import State

if TYPE_CHECKING:
    from gppo.stats.rounds import RowStop

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
    #: adaptive seeds: why the row stopped (:mod:`gppo.analysis.tables.adaptive_stops`); None for
    #: the reference, the base model and every row of a fixed-seeds table
    stop: RowStop | None = None

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
    :func:`gppo.analysis.tables.render.render` (md, latex, html, csv)."""

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
    test: str = S.DEFAULT_TEST
    #: the cost column (gppo.analysis.tables.cost_column); None when no run logged a cost
    cost: TableCost | None = None
    #: where the † note says the correction's family lies, when the table is one of several
    #: (a sweep with axes: "at this axis point", set by
    #: :func:`gppo.analysis.tables.axis_tables.point_tables`); None: this table's rows
    family: str | None = None
    #: adaptive seeds: the note on the design's intervals
    #: (:func:`gppo.analysis.tables.adaptive_stops.design_note`); set, the table has the column Stopped
    adaptive: str | None = None

    def mark(self, reason: str | None) -> str:
        return next((f.mark for f in self.footnotes if f.reason == reason), "")
