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


def test_each_baseline_default_is_written_once_in_DEFAULTS():
    """The baselines' hyper-parameters live in ``DEFAULTS`` only: no function repeats them as a
    keyword default, and a call without them uses exactly DEFAULTS (one changed value moves
    every caller)."""
    import inspect

    import torch

    from gppo.objectives import baselines as B

    g = torch.Generator().manual_seed(0)
    old = -torch.rand(2, 5, generator=g, dtype=torch.float64)
    new = old + 0.1 * torch.randn(2, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(2, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(2, 5, dtype=torch.bool)
    for name, params in B.DEFAULTS.items():
        fn = getattr(B, f"{name}_loss")
        sig = inspect.signature(inspect.unwrap(fn)).parameters
        for key in params:
            assert sig[key].default is inspect.Parameter.empty, (name, key)
        torch.manual_seed(1)  # Clip-Cov draws its tokens at random
        plain, _ = fn(old, new, adv, mask)
        torch.manual_seed(1)
        explicit, _ = fn(old, new, adv, mask, **params)
        assert torch.equal(plain, explicit), name
