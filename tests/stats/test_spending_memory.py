"""A large ``seeds.max`` plans and calibrates within modest memory and time (issue 57, item 9):
the small-df calibration drew ``(2, 100000, max)`` floats at once, about 16 GB at the 10,000
``plan`` accepts; the calibration at the shipped ``max`` stays the same to the last bit."""

from __future__ import annotations

import time
import tracemalloc

import pytest
import sweep.probe_backend  # noqa: F401  # registers the probe backend

from gppo.grid import load_plan
from gppo.stats import spending
from gppo.sweep.planning.plan_summary import plan_lines

MB = 1 << 20


@pytest.mark.slow  # half a minute under tracemalloc, no process
def test_the_calibration_at_max_10000_needs_little_memory():
    spending._null_pvalues.cache_clear()
    spending.t_calibrated_alpha.cache_clear()
    looks = tuple(range(2, 10_001))  # a lone pair (df 2 at the first look): calibrated
    tracemalloc.start()
    start = time.monotonic()
    try:
        level = spending.t_calibrated_alpha(0.05, looks, 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 120
    assert peak < 200 * MB, peak / MB  # every path at once: 2 x 100,000 x 10,000 floats, 16 GB
    assert 0.045 < level <= 0.05


@pytest.mark.parametrize(
    ("alpha", "looks", "groups", "kind", "constant"),
    [  # t_calibrated_alpha before issue 57 (all paths drawn at once), at the shipped max 8
        (0.05, tuple(range(2, 9)), 2, "power", 0.045035078888747054),
        (0.05 / 3, tuple(range(2, 9)), 3, "obf", 0.015283400720077854),
        (0.05, (2, 4, 6, 8), 4, "power", 0.04733234935315219),
    ],
)
def test_the_shipped_calibration_is_unchanged(alpha, looks, groups, kind, constant):
    assert spending.t_calibrated_alpha(alpha, looks, groups, kind) == constant


@pytest.mark.slow  # 10,000 cells: several seconds, no process
def test_a_spec_with_max_10000_plans(tmp_path):
    spec = tmp_path / "grid.yaml"
    spec.write_text(
        "name: big\nbackend: probe\nprobe: {steps: 1}\ngrid: {divergences: [tv], "
        "estimators: [mc]}\nseeds: {min: 2, max: 10000}\n"
        f"tracking: {{uri: 'sqlite:///{tmp_path}/mlflow.db'}}\n"
    )
    start = time.monotonic()
    plan = load_plan(spec)
    lines = plan_lines(plan)  # the forecast at both ends was quadratic in the cells
    assert time.monotonic() - start < 60
    assert len(plan.cells) == 10_000
    assert any("adaptive seeds: 2 to 10000 a cell" in ln for ln in lines)
