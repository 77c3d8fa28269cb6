"""The behaviour-probability (μ) buckets of the loss's diagnostics, where atomic and binary differ
from mc (docs/conventions.md "Diagnostics").

Written once, here: the loss counts its clipped tokens per bucket (:mod:`.losses`) and
:mod:`gppo.metrics` names the per-bucket metrics from the same tuple. Plain data, no torch, so
``gppo.metrics`` stays light.
"""

from __future__ import annotations

#: a token is rare under the policy below this μ (the paper's rare tokens): the first two buckets
RARE_MU = 0.1

#: (name, lower, upper): μ in [lower, upper); the last bucket includes μ = 1
MU_BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("mu_lt_0.01", 0.0, 0.01),
    ("mu_0.01_0.1", 0.01, RARE_MU),
    ("mu_0.1_0.5", RARE_MU, 0.5),
    ("mu_ge_0.5", 0.5, 1.0),
)
