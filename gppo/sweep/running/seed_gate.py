"""The launcher's side of adaptive seeds (``seeds: {min, max}``): which cells may start.

The rounds themselves are :class:`gppo.stats.rounds.Rounds` (the one engine the reports replay
too, built by :class:`~gppo.sweep.launch.Launcher` from the plan): given the finished runs' scores they say
which cells the looks need so far. The gate keeps those scores (each DONE cell's
:func:`gppo.store.run_score.run_score`, read once from its run), asks again whenever a cell
finishes, and holds every other cell back. A cell the rounds never ask for is *unneeded*: the
launch ends without it and is still complete. Because the rounds are replayed from the scores, a relaunch after a kill
asks for exactly the same cells (the resume rules of :mod:`gppo.sweep.session` reuse the
finished runs and re-attach the running ones).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from gppo import metrics as M
from gppo.grid.sharing import whole_groups
from gppo.store.run_score import run_score
from gppo.store.tracking import store_exception
from gppo.sweep.running.attempts import DONE, FAILED, CellState
from gppo.sweep.running.identical_cells import SameRuns
from gppo.sweep.session import SweepContext

if TYPE_CHECKING:
    from gppo.stats.rounds import Rounds

log = logging.getLogger(__name__)

#: runs read by one search of the store
RUNS_PER_READ = 200


class SeedGate:
    """Holds back the cells the rounds do not need yet; ``same``: the launch's groups of cells
    that are one run (a wanted cell's whole group is wanted: any member may be its runner)."""

    def __init__(self, rounds: Rounds, same: SameRuns) -> None:
        self.rounds, self.same = rounds, same
        self.scores: dict[str, float] = {}
        self.wanted: set[str] = set()
        #: cells whose seed failed with no retry left: their rows stop as "seed failed"
        self.failed: set[str] = set()
        self._tagged: dict[str, str] = {}  # run id -> the row's stop last written on it

    def observe(
        self, ctx: SweepContext, cells: Iterable[CellState], left: Collection[str] = ()
    ) -> None:
        """Read the score of every DONE cell not read yet, then ask the rounds again; ``left``:
        the cells the budget would not start (their rows' runs say so)."""
        cells = list(cells)
        todo = {st.run_id: st for st in cells if st.state == DONE and st.run_id
                and st.cell.id not in self.scores}  # fmt: skip
        ids = list(todo)
        for i in range(0, len(ids), RUNS_PER_READ):
            quoted = ", ".join(f"'{rid}'" for rid in ids[i : i + RUNS_PER_READ])
            try:
                runs = ctx.tracking.search(ctx.experiment_id, f"attributes.run_id IN ({quoted})")
            except (store_exception(), OSError) as exc:  # read again at the next ending
                log.warning("scores not read this round (the store: %s)", exc)
                return
            for run in runs:
                st = todo[run.info.run_id]
                score = run_score(run.data.metrics, st.cell.eval_k)
                if score is not None:
                    self.scores[st.cell.id] = score
        self.failed = {st.cell.id for st in cells if st.state == FAILED}
        self.wanted = whole_groups(self.rounds.wanted(self.scores, self.failed), self.same.groups)
        self._tag(ctx, {st.cell.id: st.run_id for st in cells if st.run_id}, left)

    def _tag(self, ctx: SweepContext, runs: Mapping[str, str], left: Collection[str]) -> None:
        """Write on each scored cell's run why its row stopped (:data:`gppo.metrics.
        TAG_ROW_STOPPED`), where that changed; a store error leaves it to the next round."""
        for cid, text in self.rounds.cell_texts(self.scores, left, self.failed).items():
            run_id = runs.get(cid)
            if run_id is None or self._tagged.get(run_id) == text:
                continue
            try:
                ctx.tracking.set_tags(run_id, {M.TAG_ROW_STOPPED: text})
            except (store_exception(), OSError) as exc:
                log.warning("row stops not tagged this round (the store: %s)", exc)
                return
            self._tagged[run_id] = text

    def admits(self, cell_id: str) -> bool:
        """Whether the rounds need ``cell_id`` now."""
        return cell_id in self.wanted

    def held(self, cells: Mapping[str, CellState]) -> set[str]:
        """The cells the rounds have not asked for (not started, none of their runs used)."""
        return {cid for cid, st in cells.items() if cid not in self.wanted and st.state != DONE}

    def idle(self, cells: Mapping[str, CellState]) -> dict[str, str]:
        """The held cells that no later round will ask for, with why (:meth:`gppo.stats.rounds.
        Rounds.idle`: ``unneeded``, their row decided; ``row failed``, their row stopped on a
        failed seed); the other held cells belong to rows still open."""
        held = self.held(cells)
        return {
            cid: why
            for cid, why in self.rounds.idle(self.scores, self.failed).items()
            if cid in held
        }
