"""Every forecast's point lies inside its interval (issue 57, item 3): ``status`` printed
``wall time ≈ 30s [9s, 21s]`` for one run left at max_concurrent=2 (the point floored at the
longest run, the interval not)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gppo.cell import Resources
from gppo.store.cost import Hours
from gppo.sweep.planning.forecast import (
    PREFLIGHT,
    STORE,
    CellForecast,
    Forecast,
    Source,
    status_lines,
)

RES = Resources(num_cpus=1.0, num_gpus=0.0)


def _fc(sources: list[tuple[Source, int]], concurrency: int) -> Forecast:
    fc = Forecast(concurrency=concurrency)
    for i, (source, runs) in enumerate(sources):
        for j in range(runs):
            cid = f"c{i}-s{j}"
            fc.cells[cid] = CellForecast(cid, f"key{i}", RES, source)
    return fc


def test_one_run_left_at_two_at_a_time():
    fc = _fc([(Source(PREFLIGHT, 30.0), 1)], concurrency=2)
    est, lo, hi = fc.wall_s()
    assert lo <= est <= hi, (est, lo, hi)
    line = status_lines(fc, Hours(), list(fc.cells), None)[-1]
    assert "wall time ≈ 30s [" in line and "[9s, 21s]" not in line, line


sources = st.one_of(
    st.builds(lambda m: Source(PREFLIGHT, m), st.floats(0.01, 1e5)),
    st.builds(
        lambda m, sd, n: Source(STORE, m, sd, n),
        st.floats(0.01, 1e5),
        st.one_of(st.just(math.nan), st.floats(0.0, 1e5)),
        st.integers(1, 300),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(sources, st.integers(1, 40)), min_size=1, max_size=4),
    st.integers(1, 64),
    st.data(),
)
def test_every_point_lies_inside_its_interval(groups, concurrency, data):
    fc = _fc(groups, concurrency)
    ids = data.draw(st.lists(st.sampled_from(sorted(fc.cells)), unique=True)) or None
    est, lo, hi = fc.wall_s(ids)
    assert 0.0 <= lo <= est <= hi
    h_est, h_lo, h_hi = fc.total(ids)
    for attr in ("cpu", "gpu", "wall_s"):
        assert getattr(h_lo, attr) <= getattr(h_est, attr) <= getattr(h_hi, attr) + 1e-9
