"""masked_sum equals verl's where(mask, values, 0) * mask summed, for any values: finite, nan or
inf, inside or outside the mask, whole tensor or per row (property test)."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gppo.objectives.aggregation import masked_sum

SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, 3.0e38])
VALUE = st.one_of(st.floats(-1e3, 1e3, width=32), SPECIAL)


def verl_masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None) -> torch.Tensor:
    return (torch.where(mask.bool(), values, 0.0) * mask).sum(axis)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda b: st.integers(1, 6).flatmap(
            lambda t: st.tuples(
                st.lists(VALUE, min_size=b * t, max_size=b * t),
                st.lists(st.booleans(), min_size=b * t, max_size=b * t),
                st.just((b, t)),
            )
        )
    ),
    st.sampled_from([None, -1]),
)
def test_masked_sum_is_verls_for_any_values(case, axis) -> None:
    values, mask, shape = case
    v = torch.tensor(values, dtype=torch.float32).view(shape)
    m = torch.tensor(mask, dtype=torch.float32).view(shape)
    got, want = masked_sum(v, m, axis), verl_masked_sum(v, m, axis)
    assert torch.equal(got.isnan(), want.isnan())
    finite = ~want.isnan()
    assert torch.equal(got[finite], want[finite])
