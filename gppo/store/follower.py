"""A follower's run costs nothing: one home for the rule every reader of cost applies.

A follower is a cell served by an identical cell's run (:mod:`gppo.grid.sharing`); its own MLflow
run is a copy of that run's results, tagged :data:`gppo.metrics.TAG_SAME_RUNS` with the source
run's id (:mod:`gppo.store.same_runs`). It trained nothing: whoever adds up what runs held
(``status``, the report's cost, a sweep's spend against its budget) counts its source once and
the copy as nothing, and whoever forecasts a run's time from earlier runs takes no sample from it.
"""

from __future__ import annotations

from collections.abc import Mapping

from gppo import metrics as M


def costs_nothing(tags: Mapping[str, str]) -> bool:
    """Whether the run with ``tags`` is a follower's copy: it cost nothing and is no sample of
    a run's cost or time."""
    return M.TAG_SAME_RUNS in tags
