"""The library, the grid spec and the verl plugin accept and refuse the same ratio bounds, with
the library's wording (one rule: gppo.objectives.checks.RATIO_BOUNDS_RULE)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gppo.grid.schema import Objective
from gppo.objectives.checks import RATIO_BOUNDS_RULE, check_ratio_bounds

BAD = [(1.0, 10.0), (0.5, 1.0), (-0.1, 10.0), (0.9, 0.8), (0.5, float("nan"))]
GOOD = [(0.0, 10.0), (0.5, 10.0), (0.99, float("inf"))]


def _plugin(bounds):
    from gppo.backends.verl.plugin import GPPOPolicyLossConfig

    return GPPOPolicyLossConfig(ratio_bound_low=bounds[0], ratio_bound_high=bounds[1])


@pytest.mark.parametrize("bounds", BAD)
def test_every_layer_refuses_the_same_bounds_with_one_wording(bounds):
    with pytest.raises(ValueError, match="0 <= low < 1 < high"):
        check_ratio_bounds(bounds)
    with pytest.raises(ValidationError, match="0 <= low < 1 < high"):
        Objective(ratio_bounds=bounds)
    with pytest.raises(ValueError, match="0 <= low < 1 < high"):
        _plugin(bounds)


@pytest.mark.parametrize("bounds", GOOD)
def test_every_layer_accepts_the_same_bounds(bounds):
    assert check_ratio_bounds(bounds) == bounds
    assert tuple(Objective(ratio_bounds=bounds).ratio_bounds) == bounds
    assert _plugin(bounds).ratio_bounds == bounds
    assert "0 <= low < 1 < high" in RATIO_BOUNDS_RULE
