"""Method registry: names, aliases, defaults, parameter validation."""

from __future__ import annotations

import pytest
import torch
from objectives_helpers import make_batch

from gppo.objectives import gppo_policy_loss
from gppo.objectives.methods import alias_cells, baseline_names, get_method, known_methods

BASELINES = baseline_names()


def test_names() -> None:
    assert set(known_methods()) == {"gppo", "grpo", "dapo", "dppo", "ripo", *BASELINES}
    assert BASELINES == ["gspo", "gmpo", "sapo", "cispo", "clip_cov"]  # the paper's Table 1 order
    assert alias_cells() == {
        "grpo": "tv/mc",
        "dapo": "kl/mc",
        "ripo": "chi2/atomic",
        "dppo": "tv/binary",
    }


def test_unknown_method_lists_known() -> None:
    with pytest.raises(
        KeyError,
        match=r"^unknown method 'ppo'; known: gppo, grpo, dapo, ripo, dppo, gspo, gmpo, sapo, "
        r"cispo, clip_cov$",
    ):
        get_method("ppo")


@pytest.mark.parametrize(
    ("name", "div", "est"),
    [
        ("grpo", "tv", "mc"),
        ("dapo", "kl", "mc"),
        ("dppo", "tv", "binary"),
        ("ripo", "chi2", "atomic"),
    ],
)
def test_aliases_are_cells(name: str, div: str, est: str) -> None:
    m = get_method(name)
    assert (m.divergence, m.estimator) == (div, est)
    old, new, adv, mask = make_batch(seed=3)
    got, _ = m.loss(old, new, adv, mask)
    delta = 0.2 if name == "dppo" else None  # dppo: delta = 2 tau, tau = 0.1
    want, _ = gppo_policy_loss(old, new, adv, mask, divergence=div, estimator=est, delta=delta)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_dppo_delta_is_two_tau() -> None:
    old, new, adv, mask = make_batch(seed=4, spread=0.6)
    got, _ = get_method("dppo").loss(old, new, adv, mask, tau=0.15)
    want, _ = gppo_policy_loss(old, new, adv, mask, divergence="tv", estimator="binary", delta=0.3)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_gppo_needs_a_cell() -> None:
    m = get_method("gppo")
    assert m.divergence is None and m.estimator is None
    with pytest.raises(
        ValueError, match=r"method 'gppo' needs parameter\(s\) \['divergence', 'estimator'\]"
    ):
        m.resolve({})
    with pytest.raises(KeyError, match=r"^unknown divergence 'nope'; known: tv, chi2,"):
        m.resolve({"divergence": "nope", "estimator": "mc"})
    p = m.resolve({"divergence": "kl", "estimator": "binary", "r_min": 0.7})
    assert p == {
        "divergence": "kl",
        "estimator": "binary",
        "delta": None,
        "r_min": 0.7,
        "ratio_bounds": (0.5, 10.0),
        "dual_clip": 10.0,
    }
    old, new, adv, mask = make_batch(seed=5)
    got, _ = m.loss(
        old,
        new,
        adv,
        mask,
        divergence="hellinger",
        estimator="atomic",
        loss_agg_mode="seq-mean-token-sum",
    )
    want, _ = gppo_policy_loss(
        old,
        new,
        adv,
        mask,
        divergence="hellinger",
        estimator="atomic",
        loss_agg_mode="seq-mean-token-sum",
    )
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_resolve_rejects_unknown_keys() -> None:
    with pytest.raises(
        ValueError,
        match=r"method 'gspo' does not take parameter\(s\) \['ratio_bounds'\]; its parameters are",
    ):
        get_method("gspo").resolve({"ratio_bounds": (0.5, 10.0)})
    with pytest.raises(
        ValueError, match=r"method 'grpo' does not take parameter\(s\) \['divergence'\]"
    ):
        get_method("grpo").resolve({"divergence": "kl"})
    assert "generator" in get_method("clip_cov").param_names


def test_paper_defaults() -> None:
    assert get_method("gspo").defaults == {"clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4}
    assert get_method("gmpo").defaults == {"clip_ratio_low": 0.4, "clip_ratio_high": 0.4}
    assert get_method("sapo").defaults == {"tau_pos": 1.0, "tau_neg": 1.05}
    assert get_method("cispo").defaults == {"clip_ratio_low": 10.0, "clip_ratio_high": 0.2}
    assert get_method("clip_cov").defaults == {
        "clip_ratio_low": 1.0,
        "clip_ratio_high": 1.0,
        "clip_cov_ratio": 2e-4,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
    }
    for name in ("grpo", "dapo", "ripo", "gppo"):
        assert get_method(name).defaults == {
            "delta": None,
            "r_min": 0.8,
            "ratio_bounds": (0.5, 10.0),
            "dual_clip": 10.0,
        }
    assert get_method("dppo").defaults == {
        "tau": 0.1,
        "ratio_bounds": (0.5, 10.0),
        "dual_clip": 10.0,
    }
    with pytest.raises(TypeError):
        get_method("gspo").defaults["clip_ratio_low"] = 1.0  # type: ignore[index]


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_run_with_metrics(name: str) -> None:
    old, new, adv, mask = make_batch(seed=6)
    lp = new.clone().requires_grad_(True)
    loss, metrics = get_method(name).loss(old, lp, adv, mask)
    loss.backward()
    assert torch.isfinite(loss) and bool(torch.isfinite(lp.grad).all())
    assert {"approx_kl", "ratio_mean", "ratio_max", "abs_log_ratio"} <= set(metrics)
    assert metrics["abs_log_ratio"] >= abs(metrics["approx_kl"]) - 1e-6  # mean |t| >= |mean t|
    assert all(isinstance(v, float) for v in metrics.values())
    with pytest.raises(ValueError, match="shape"):
        get_method(name).loss(old, new, adv[:, 1:], mask)
