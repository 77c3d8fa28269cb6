"""Property tests (hypothesis) of the regions and the loss."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from objectives_helpers import ALL_CELLS, finite

import gppo.objectives
from gppo.objectives import calibrate_delta, gppo_policy_loss, proximal_region

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CELLS = st.sampled_from(ALL_CELLS)
MU = st.floats(min_value=1e-8, max_value=1 - 1e-8)
LOGP = st.floats(min_value=-50.0, max_value=0.0)
ADV = st.floats(min_value=-1e4, max_value=1e4)


@st.composite
def batches(draw: st.DrawFn, n_max: int = 24) -> tuple[torch.Tensor, ...]:
    n = draw(st.integers(min_value=1, max_value=n_max))
    old = torch.tensor(draw(st.lists(LOGP, min_size=n, max_size=n)), dtype=torch.float64)
    new = torch.tensor(draw(st.lists(LOGP, min_size=n, max_size=n)), dtype=torch.float64)
    adv = torch.tensor(draw(st.lists(ADV, min_size=n, max_size=n)), dtype=torch.float64)
    mask = torch.tensor(
        draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n)), dtype=torch.float64
    )
    mask[0] = 1.0
    return old.view(1, n), new.view(1, n), adv.view(1, n), mask.view(1, n)


KNOBS = st.sampled_from([((0.5, 10.0), 10.0), (None, None), (None, 3.0), ((0.8, 1.2), None)])
DTYPES = st.sampled_from([torch.float32, torch.float64])
MODES = st.sampled_from(
    ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)


@FAST
@given(cell=CELLS, b=batches(), knobs=KNOBS, dtype=DTYPES, mode=MODES)
def test_finite_loss_and_grad(cell, b, knobs, dtype, mode) -> None:
    old, new, adv, mask = (x.to(dtype) for x in b)
    lp = new.clone().requires_grad_(True)
    loss, metrics = gppo_policy_loss(
        old,
        lp,
        adv,
        mask,
        divergence=cell[0],
        estimator=cell[1],
        ratio_bounds=knobs[0],
        dual_clip=knobs[1],
        loss_agg_mode=mode,
    )
    loss.backward()
    assert finite(loss) and finite(lp.grad)
    assert all(math.isfinite(v) for v in metrics.values())


@FAST
@given(cell=CELLS, mu=st.lists(MU, min_size=1, max_size=16), scale=st.floats(1.05, 4.0))
def test_bounds_contain_one_and_widen(cell, mu, scale) -> None:
    div, est = cell
    mu_t = torch.tensor(sorted(mu), dtype=torch.float64)
    d = calibrate_delta(div)
    lo, hi = proximal_region(div, est, d, mu_t)
    assert bool((lo >= 0).all()) and bool((lo <= 1).all()) and bool((hi >= 1).all())
    if est == "binary":
        assert bool((hi <= (1 / mu_t) * (1 + 1e-12)).all())
    lo2, hi2 = proximal_region(div, est, d * scale, mu_t)  # widen as delta grows
    assert bool((lo2 <= lo + 1e-12).all()) and bool((hi2 >= hi * (1 - 1e-12)).all())
    if est != "mc":  # widen as mu falls (mu_t is increasing)
        assert bool((lo[1:] >= lo[:-1] - 1e-12).all()) and bool(
            (hi[1:] <= hi[:-1] * (1 + 1e-12)).all()
        )


@FAST
@given(
    cell=CELLS,
    b=batches(),
    junk=st.lists(st.floats(-50.0, 0.0), min_size=3, max_size=3),
    mode=MODES,
)
def test_masked_tokens_have_no_effect(cell, b, junk, mode) -> None:
    old, new, adv, mask = b
    kw = {"divergence": cell[0], "estimator": cell[1], "loss_agg_mode": mode}
    lp = new.clone().requires_grad_(True)
    loss, _ = gppo_policy_loss(old, lp, adv, mask, **kw)
    loss.backward()
    off = mask == 0
    old2, new2, adv2 = old.clone(), new.clone(), adv.clone()
    old2[off], new2[off], adv2[off] = junk[0], junk[1], junk[2] * 100
    lp2 = new2.clone().requires_grad_(True)
    loss2, _ = gppo_policy_loss(old2, lp2, adv2, mask, **kw)
    loss2.backward()
    torch.testing.assert_close(loss2, loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lp2.grad[~off], lp.grad[~off], rtol=1e-12, atol=1e-12)
    assert bool((lp2.grad[off] == 0).all())


@FAST
@given(cell=CELLS, b=batches())
def test_ratio_one_is_plain_policy_gradient(cell, b) -> None:
    old, _, adv, mask = b
    lp = old.clone().requires_grad_(True)
    loss, m = gppo_policy_loss(old, lp, adv, mask, divergence=cell[0], estimator=cell[1])
    loss.backward()
    n = mask.sum()
    torch.testing.assert_close(loss, -(adv * mask).sum() / n, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lp.grad, -adv * mask / n, rtol=1e-12, atol=1e-12)
    assert m["clip_frac_low"] == 0.0 and m["clip_frac_high"] == 0.0 and m["ratio_mean"] == 1.0


def test_objectives_imports_only_torch_and_stdlib() -> None:
    """objectives/ imports torch, math and small stdlib helpers: no numpy, and of ours only the
    two leaf modules every layer may use (gppo.errors, gppo.registry: stdlib only). An import
    under ``if TYPE_CHECKING:`` (a type the checker reads, never run) is no dependency."""
    allowed = {
        "torch",
        "math",
        "functools",
        "dataclasses",
        "collections",
        "typing",
        "types",
        "__future__",
        "json",  # identity.py: a loss's canonical key as text (no I/O)
    }
    ours = {"gppo.errors", "gppo.registry"}
    root = Path(gppo.objectives.__file__).parent
    leaves = [root.parent / "errors.py", root.parent / "registry.py"]
    for path in [*root.glob("*.py"), *leaves]:
        tree = ast.parse(path.read_text())
        type_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level > 0:
                    continue  # relative: inside objectives
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if path in leaves:  # the leaves themselves: stdlib (and each other) only
                    assert name.split(".")[0] != "torch", f"{path.name} imports {name}"
                    assert not name.startswith("gppo") or name in ours, f"{path.name}: {name}"
                    continue
                assert name in ours or name.split(".")[0] in allowed, f"{path.name} imports {name}"
