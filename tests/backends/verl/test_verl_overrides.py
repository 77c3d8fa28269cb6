"""Every cell of both paper configs: overrides compose with verl's own Hydra config and pass
verl's validation, and every value lands where we meant it (nothing reinterpreted)."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from gppo.backends.verl.overrides import (
    OverrideError,
    build_overrides,
    cell_overrides,
    render_value,
)
from gppo.backends.verl.settings import VerlSettings
from gppo.backends.verl.validate import VerlConfigError, compose, validate

from .conftest import PAPER_CONFIGS


def _plain(value):
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _same(got, want) -> bool:
    if isinstance(want, float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=0, abs_tol=0)
    if isinstance(want, tuple):
        want = list(want)
    return got == want


@pytest.mark.slow  # 34 Hydra compositions, about 40 s
@pytest.mark.parametrize("config", PAPER_CONFIGS)
def test_every_cell_composes_and_validates(config, all_paper_cells, composed):
    cells = all_paper_cells[config]
    assert len(cells) == 17  # 4 divergences x 3 estimators + 5 baselines, one seed
    for cell in cells:
        _, wanted, cfg, built = composed[config, cell.id]
        for key, value in wanted.items():
            got = _plain(OmegaConf.select(cfg, key.lstrip("+"), throw_on_missing=True))
            assert _same(got, value), f"{cell.id}: {key} = {got!r}, meant {value!r}"
        actor, rollout = built["actor"], built["rollout"]
        # the paper's setup, as verl's own dataclasses see it
        assert cfg.data.train_batch_size * rollout.n == 1024
        assert cfg.data.train_batch_size // actor.ppo_mini_batch_size == 8
        assert rollout.val_kwargs.n == cell.eval_k == 8 and rollout.val_kwargs.do_sample
        assert cfg.data.max_response_length == 20480
        assert actor.optim.lr == 1e-6 and actor.optim.lr_scheduler_type == "constant"
        assert not actor.use_kl_loss and not cfg.algorithm.use_kl_in_reward
        assert cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes == 8
        assert cfg.trainer.total_training_steps == (400 if config == "paper-math" else 600)
        assert cfg.trainer.logger == ["console", "mlflow"] and cfg.trainer.resume_mode == "auto"
        assert len(cfg.data.val_files) == len(cell.benchmarks) == 4
        loss = actor.policy_loss
        if cell.method == "gppo":
            assert type(loss).__name__ == "GPPOPolicyLossConfig" and loss.loss_mode == "gppo"
            assert (loss.divergence, loss.estimator) == (cell.divergence, cell.estimator)
            assert loss.delta == pytest.approx(cell.delta)
            assert (loss.ratio_bound_low, loss.ratio_bound_high) == (0.5, 10.0)
            assert loss.dual_clip == 10.0 and actor.loss_agg_mode == "token-mean"
        else:
            assert type(loss).__name__ == "PolicyLossConfig"


def test_baselines_get_their_papers_defaults(all_paper_cells, composed):
    cells = {c.id: c for c in all_paper_cells["paper-math"]}
    actors = {
        cid: composed["paper-math", cid][3]["actor"]
        for cid in ("gspo-s0", "gmpo-s0", "sapo-s0", "cispo-s0", "clip_cov-s0")
    }
    gspo = actors["gspo-s0"]
    assert gspo.policy_loss.loss_mode == "gspo"
    assert (gspo.clip_ratio_low, gspo.clip_ratio_high) == (3e-4, 4e-4)
    assert actors["gmpo-s0"].policy_loss.loss_mode == "geo_mean"
    sapo = actors["sapo-s0"]
    assert sapo.policy_loss.loss_mode == "sapo" and (sapo.tau_pos, sapo.tau_neg) == (1.0, 1.05)
    assert actors["cispo-s0"].policy_loss.loss_mode == "cispo"
    cov = actors["clip_cov-s0"]
    assert cov.policy_loss.loss_mode == "clip_cov"
    assert cov.policy_loss.clip_cov_ratio == 2e-4
    assert (cov.policy_loss.clip_cov_lb, cov.policy_loss.clip_cov_ub) == (1.0, 5.0)
    assert (cov.clip_ratio_low, cov.clip_ratio_high) == (1.0, 1.0)
    # every baseline value the cell carries reached verl unchanged
    for cid, actor in actors.items():
        for key, value in cells[cid].loss_params.items():
            if key in ("clip_ratio_low", "clip_ratio_high", "tau_pos", "tau_neg", "loss_agg_mode"):
                assert actor[key] == value, (cid, key)


STRINGS = [
    "plain",
    "/shared/m/Qwen3-8B.v2/x_y",
    "/",
    "a b",
    "it's",
    "x\\y",
    "tail\\",
    "${oc.env:HOME}",
    "a,b=c]",
    "null",
    "~/d",
    "é",
    "1e-6",
    "42",
]


def test_strings_reach_verl_verbatim():
    cfg = compose([f"+probe.k{i}={render_value(v)}" for i, v in enumerate(STRINGS)])
    assert [cfg.probe[f"k{i}"] for i in range(len(STRINGS))] == STRINGS


def test_bad_override_is_one_line(all_paper_cells):
    with pytest.raises(VerlConfigError) as err:
        compose(["actor_rollout_ref.actor.no_such_field=1"])
    assert "\n" not in str(err.value) and "no_such_field" in str(err.value)
    cell = all_paper_cells["paper-math"][0]
    good = cell_overrides(cell, VerlSettings.model_validate(cell.settings))
    cfg = compose([*good, "actor_rollout_ref.actor.loss_agg_mode=bogus"])
    with pytest.raises(VerlConfigError) as err:
        validate(cfg)
    assert "\n" not in str(err.value) and "bogus" in str(err.value)


def test_unknown_method_and_param_are_refused(all_paper_cells):
    cell = next(c for c in all_paper_cells["paper-math"] if c.id == "gspo-s0")
    settings = VerlSettings.model_validate(cell.settings)
    from dataclasses import replace

    with pytest.raises(OverrideError, match=r"known: .*clip_ratio_high"):
        build_overrides(replace(cell, loss_params={"bogus": 1}), settings)
    with pytest.raises(OverrideError, match="no verl loss"):
        build_overrides(replace(cell, method="nope"), settings)


def test_every_registered_baseline_has_a_verl_loss_mode():
    from gppo.backends.verl.overrides import BASELINE_LOSS_MODES
    from gppo.objectives.methods import baseline_names

    assert set(BASELINE_LOSS_MODES) == set(baseline_names())
