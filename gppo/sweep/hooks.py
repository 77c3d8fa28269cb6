"""Hooks the launcher calls; the lead wires the report in here.

:func:`after_sweep` runs once when a launch ends with every cell finished. It is called inside
``try/except`` by :func:`gppo.sweep.launch.run_after_sweep_hook`, so launch works without it.
"""

from __future__ import annotations

from typing import Any


def after_sweep(plan: Any, *, tracking_uri: str, experiment_id: str) -> None:
    """Build the sweep's report (Table 1, figures). TODO(lead): call gppo.analysis here, e.g.
    ``gppo.analysis.report(plan, tracking_uri=tracking_uri, ...)``; a no-op until then."""
    return None
