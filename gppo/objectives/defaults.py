"""The paper's defaults for a GPPO cell, in one place: the loss functions, the method registry,
the grid spec (``objective``, ``calibration``, ``reference``), the report and the verl plugin's
config all read them. Plain data, no torch.

* ``R_MIN``: δ is calibrated as |f(r_min)| (docs/conventions.md "Calibration");
* ``RATIO_BOUNDS``: every per-token region intersected with [0.5, 10];
* ``DUAL_CLIP``: a negative-advantage token's loss capped at -c A (verl's ``clip_ratio_c``);
* ``LOSS_AGG_MODE``: how a loss aggregates its token matrix when a spec does not say
  (``token-mean``: docs/conventions.md);
* ``REFERENCE``: the cell Table 1's relative change is measured against, ``tv/mc`` (GRPO's cell,
  PPO's clip): the grid spec's ``reference`` and the report's default;
* ``SEEDS_MIN``, ``SEEDS_MAX``, ``SEEDS_BATCH``: adaptive seeds' ``seeds: {min, max, batch}``
  when a spec leaves them out, and :class:`gppo.stats.sequential.Design`'s;
* ``TEST``: the comparison's test (``welch``): ``analysis.test`` when a spec leaves it out, the
  report's and the adaptive rule's default (:data:`gppo.stats.inference.DEFAULT_TEST`);
* :func:`grid_label`: a grid cell's label, ``DIVERGENCE/ESTIMATOR`` (Table 1's row id, an alias's
  cell, a tuning trial's cell).

(The last two are our reading of the paper's "dual clipping ... with lower and upper bounds of 0.5
and 10": docs/library.md, "The reading of the paper's dual clip".)
"""

from __future__ import annotations

from typing import Final

R_MIN: float = 0.8
RATIO_BOUNDS: tuple[float, float] = (0.5, 10.0)
DUAL_CLIP: float = 10.0
REFERENCE: str = "tv/mc"
LOSS_AGG_MODE: str = "token-mean"
SEEDS_MIN: int = 2
SEEDS_MAX: int = 8
SEEDS_BATCH: int = 1
TEST: Final = "welch"


def grid_label(divergence: str, estimator: str) -> str:
    """A grid cell's label: ``tv/mc`` for TV with the single-sample MC estimator."""
    return f"{divergence}/{estimator}"
