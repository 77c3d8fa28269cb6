"""The library, the grid spec and the verl plugin accept and refuse the same ratio bounds, with
the library's wording (one rule: gppo.objectives.checks.RATIO_BOUNDS_RULE); the library and the
grid spec the same δ, r_min and dual_clip (gppo.objectives.checks)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gppo.grid.schema import Calibration, Objective, Override
from gppo.objectives.checks import (
    RATIO_BOUNDS_RULE,
    check_delta,
    check_dual_clip,
    check_r_min,
    check_ratio_bounds,
)

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


INF, NAN = float("inf"), float("nan")


#: name: (the library's check, refused, accepted, its wording, the spec's fields holding it)
def _plugin_config(**fields):
    """verl's loss config of our plugin (``policy_loss`` in a verl cell): the same rules."""
    from gppo.backends.verl.plugin import GPPOPolicyLossConfig

    return GPPOPolicyLossConfig(**fields)


RULES = {
    "delta": (
        check_delta,
        [0.0, -1.0, INF, NAN],
        [1e-6, 0.2, 5.0],
        "delta must be a finite number > 0",
        [
            lambda v: Calibration(delta={"kl": v}).delta["kl"],
            lambda v: Override(delta=v).delta,
            lambda v: _plugin_config(delta=v).delta,
        ],
    ),
    "r_min": (
        check_r_min,
        [0.0, 1.0, 1.5, -0.2, NAN],
        [0.01, 0.8, 0.999],
        "r_min must be a number in the open interval (0, 1)",
        [lambda v: Calibration(r_min=v).r_min, lambda v: _plugin_config(r_min=v).r_min],
    ),
    "dual_clip": (
        check_dual_clip,
        [1.0, 0.5, -3.0, NAN],
        [1.0001, 10.0, INF, None],
        "dual_clip must be None or a number > 1",
        [
            lambda v: Objective(dual_clip=v).dual_clip,
            lambda v: _plugin_config(dual_clip=v).dual_clip,
        ],
    ),
}
CASES = [
    (name, v, ok)
    for name, r in RULES.items()
    for ok, vs in ((False, r[1]), (True, r[2]))
    for v in vs
]


@pytest.mark.parametrize(("name", "value", "ok"), CASES, ids=[f"{n}={v}" for n, v, _ in CASES])
def test_the_library_and_the_spec_share_each_rule_and_its_words(name, value, ok):
    check, _, _, words, fields = RULES[name]
    if ok:
        assert check(value) == value
        assert all(field(value) == value for field in fields)
        return
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        check(value)
    for field in fields:  # pydantic's ValidationError (the spec) or verl's config (ValueError)
        with pytest.raises((ValidationError, ValueError)) as info:
            field(value)
        assert words in str(info.value)


def test_the_loss_refuses_an_infinite_delta():
    import torch

    from gppo.objectives import gppo_policy_loss, proximal_region

    x = torch.zeros(1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="delta must be a finite number > 0"):
        gppo_policy_loss(x, x, x, torch.ones(1, 2), divergence="kl", estimator="mc", delta=INF)
    with pytest.raises(ValueError, match="delta must be a finite number > 0"):
        proximal_region("kl", "atomic", INF, torch.full((2,), 0.5))


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
