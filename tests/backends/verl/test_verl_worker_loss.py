"""Our losses inside verl's own worker loss, ``verl.workers.utils.losses.ppo_loss``.

Every cell's ``ActorConfig`` is the one verl builds from the cell's Hydra overrides (loss mode
``gppo`` for the 12 grid cells, verl's own modes for the five baselines). The batch is laid out by
verl's utilities (``left_right_2_no_padding``, nested log-probs, ``prepare_micro_batches``);
``dp_size``/``batch_num_tokens``/``global_batch_size`` are set as the engine and the trainer set
them, and ``ppo_loss`` fills ``config.global_batch_info`` itself. Checked against
gppo.objectives on the padded tokens: the loss (1e-6), the gradient w.r.t. the log-probs, and the
metrics after verl's ``Metric`` aggregation under the names our verl backend maps.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from gppo import metrics as gm
from gppo.backends.verl import synthetic as sy
from gppo.backends.verl.metrics_map import DIAGNOSTIC_KEYS, mapped_points
from gppo.objectives import AGG_MODES, agg_loss, gppo_token_loss
from gppo.objectives.methods import get_method

ATOL = 1e-6


def _cells(math_actors, method_is_gppo: bool):
    return [(c, a) for c, a in math_actors.values() if (c.method == "gppo") == method_is_gppo]


def _gppo_kwargs(cell) -> dict:
    p = cell.loss_params
    rb = p["ratio_bounds"]
    return {
        "divergence": p["divergence"],
        "estimator": p["estimator"],
        "delta": p["delta"],
        "ratio_bounds": None if rb is None else tuple(rb),
        "dual_clip": p["dual_clip"],
    }


def _verl(actor, tokens, data, dtype=torch.float32, autocast=False):
    """verl's ppo_loss on the nested model output of ``tokens.log_prob`` -> (loss, padded grad,
    aggregated metrics)."""
    from verl.workers.utils.padding import no_padding_2_padding

    leaf = sy.nested_log_probs(tokens.log_prob.to(dtype), data).detach().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss, metrics = sy.call_ppo_loss(actor, sy.as_model_output(leaf, data), data)
    loss.backward()
    grad = no_padding_2_padding(leaf.grad, data)
    return loss.detach(), grad, sy.aggregate_metrics([metrics])


def _ours_gppo(cell, tokens, mode, info):
    lp = tokens.log_prob.clone().requires_grad_(True)
    mat, metrics = gppo_token_loss(
        tokens.old_log_prob, lp, tokens.advantages, tokens.response_mask, **_gppo_kwargs(cell)
    )
    if tokens.rollout_is_weights is not None:
        mat = mat * tokens.rollout_is_weights
    loss = agg_loss(mat, tokens.response_mask, mode, **info)
    loss.backward()
    return loss.detach(), lp.grad, metrics


def _info(data, actor) -> dict:
    return {
        "dp_size": data["dp_size"],
        "batch_num_tokens": data["batch_num_tokens"],
        "global_batch_size": data["global_batch_size"],
        "loss_scale_factor": actor.loss_scale_factor,
    }


# (dp_size, tokens on the other ranks, global batch size / B, IS weights): one rank alone, and
# one rank of two whose partner holds 17 more tokens and 6 more sequences.
LAYOUTS = [(1, 0, 1, False), (2, 17, 2, True)]


def test_twelve_cells_every_aggregation_mode(math_actors):
    cells = _cells(math_actors, method_is_gppo=True)
    assert len(cells) == 12
    for i, (cell, actor) in enumerate(cells):
        assert actor.policy_loss.loss_mode == "gppo"
        for mode in AGG_MODES:
            cfg = dataclasses.replace(actor, loss_agg_mode=mode)  # verl re-validates it
            for dp, other, gbs, weights in LAYOUTS:
                tokens = sy.synthetic_tokens(seed=10 * i + dp, spread=0.3, is_weights=weights)
                b = tokens.response_mask.shape[0]
                data = sy.synthetic_batch(tokens, seed=i, global_batch_size=gbs * b)
                sy.set_engine_batch_info(data, dp_size=dp, other_ranks_tokens=other)
                v_loss, v_grad, v_metrics = _verl(cfg, tokens, data)
                o_loss, o_grad, o_metrics = _ours_gppo(cell, tokens, mode, _info(data, cfg))
                where = f"{cell.id} {mode} dp={dp}"
                assert v_loss.dtype == torch.float32, where
                torch.testing.assert_close(v_loss, o_loss, rtol=0, atol=ATOL, msg=where)
                mask = tokens.response_mask
                torch.testing.assert_close(v_grad * mask, o_grad * mask, rtol=1e-6, atol=1e-7)
                assert torch.count_nonzero(o_grad) > 0, where
                for key, value in o_metrics.items():
                    assert v_metrics[f"actor/{key}"] == pytest.approx(value, abs=1e-12), key
                assert v_metrics["actor/pg_loss"] == pytest.approx(float(o_loss), abs=ATOL)


def test_metrics_survive_aggregation_under_mapped_names(math_actors):
    """Micro-batches split by verl (fixed size and dynamic): verl's Metric aggregation gives the
    micro-batch mean of every diagnostic and the summed loss; the backend maps every one."""
    cell, actor = _cells(math_actors, method_is_gppo=True)[8]  # kl-binary
    tokens = sy.synthetic_tokens(batch_size=8, seed=3, spread=0.4)
    whole = sy.synthetic_batch(tokens, seed=3)
    sy.set_engine_batch_info(whole)
    w_loss, w_grad, _ = _verl(actor, tokens, whole)
    for split in ({"micro_batch_size": 2}, {"max_token_len": 40}):
        data = sy.synthetic_batch(tokens, seed=3)
        sy.set_engine_batch_info(data)  # before the split, as forward_backward_batch does
        parts = sy.micro_batches(data, **split)
        assert len(parts) > 1, split
        total, per_micro, ours = 0.0, [], []
        for part in parts:
            sub = _sub_tokens(tokens, _rows(part, data))
            leaf = sy.nested_log_probs(sub.log_prob, part).requires_grad_(True)
            loss, metrics = sy.call_ppo_loss(actor, sy.as_model_output(leaf, part), part)
            total += float(loss.detach())
            per_micro.append(metrics)
            ours.append(_ours_gppo(cell, sub, "token-mean", _info(part, actor))[2])
        assert total == pytest.approx(float(w_loss), abs=ATOL), split
        agg = sy.aggregate_metrics(per_micro)
        assert agg["actor/clip_frac_low"] > 0 and agg["actor/clip_frac_high"] > 0, agg
        assert agg["actor/pg_loss"] == pytest.approx(float(w_loss), abs=ATOL)
        for key in DIAGNOSTIC_KEYS:
            want = sum(m[key] for m in ours) / len(ours)
            assert agg[f"actor/{key}"] == pytest.approx(want, abs=1e-9), key
        history = {k: [(1, v)] for k, v in agg.items()}
        points = {p.key: p.value for p in mapped_points(history, benchmarks=(), k=8)}
        for key in DIAGNOSTIC_KEYS:
            assert points[gm.train_metric(key)] == pytest.approx(agg[f"actor/{key}"])
        assert points[gm.APPROX_KL] == pytest.approx(agg["actor/approx_kl"])
        assert points[gm.POLICY_LOSS] == pytest.approx(agg["actor/pg_loss"])
    assert torch.count_nonzero(w_grad) > 0


def _sub_tokens(tokens: sy.SyntheticTokens, rows: list[int]) -> sy.SyntheticTokens:
    """The padded tokens of the sequences of one micro-batch, in its order."""
    return sy.SyntheticTokens(
        *(x[rows] for x in (tokens.old_log_prob, tokens.log_prob, tokens.advantages)),
        tokens.response_mask[rows],
        None,
    )


def _rows(part, data) -> list[int]:
    """Row of ``data`` each sequence of ``part`` came from (matched on its prompt and response)."""
    keys = [
        (p.tolist(), r.tolist()) for p, r in zip(data["prompts"], data["responses"], strict=True)
    ]
    return [
        keys.index((p.tolist(), r.tolist()))
        for p, r in zip(part["prompts"], part["responses"], strict=True)
    ]


def test_bf16_log_probs_under_autocast_give_float32_loss(math_actors):
    """The engine hands ppo_loss bf16 log-probs under autocast: the gppo loss is float32 and
    equals the float32 loss on the same (bf16-rounded) values, for every cell."""
    for i, (cell, actor) in enumerate(_cells(math_actors, method_is_gppo=True)):
        tokens = sy.synthetic_tokens(seed=i, spread=0.3)
        rounded = dataclasses.replace(tokens, log_prob=tokens.log_prob.bfloat16().float())
        data = sy.synthetic_batch(tokens, seed=i)
        sy.set_engine_batch_info(data)
        b_loss, b_grad, b_m = _verl(actor, tokens, data, dtype=torch.bfloat16, autocast=True)
        f_loss, f_grad, f_m = _verl(actor, rounded, data)
        assert b_loss.dtype == torch.float32 and b_grad.dtype == torch.bfloat16, cell.id
        torch.testing.assert_close(b_loss, f_loss, rtol=0, atol=0)
        torch.testing.assert_close(b_grad, f_grad.bfloat16(), rtol=0, atol=0)
        assert b_m == f_m


def test_five_baselines_through_their_verl_loss_modes(math_actors):
    """verl's own modes (gspo, geo_mean, sapo, cispo, clip_cov) inside ppo_loss equal our
    baselines (values, gradients), every aggregation mode, and their metrics map."""
    cells = _cells(math_actors, method_is_gppo=False)
    assert sorted(c.method for c, _ in cells) == ["cispo", "clip_cov", "gmpo", "gspo", "sapo"]
    for i, (cell, actor) in enumerate(cells):
        params = {k: v for k, v in cell.loss_params.items() if k != "loss_agg_mode"}
        for mode in AGG_MODES:
            cfg = dataclasses.replace(actor, loss_agg_mode=mode)
            for dp, other, gbs, _ in LAYOUTS:
                tokens = sy.synthetic_tokens(seed=i + dp, spread=0.3)
                b = tokens.response_mask.shape[0]
                data = sy.synthetic_batch(tokens, seed=i, global_batch_size=gbs * b)
                sy.set_engine_batch_info(data, dp_size=dp, other_ranks_tokens=other)
                torch.manual_seed(5)  # clip_cov's random choice, the same for both
                v_loss, v_grad, v_metrics = _verl(cfg, tokens, data)
                lp = tokens.log_prob.clone().requires_grad_(True)
                torch.manual_seed(5)
                o_loss, _ = get_method(cell.method).loss(
                    tokens.old_log_prob,
                    lp,
                    tokens.advantages,
                    tokens.response_mask,
                    loss_agg_mode=mode,
                    global_batch_info=_info(data, cfg),
                    **params,
                )
                o_loss.backward()
                where = f"{cell.id} {mode} dp={dp}"
                torch.testing.assert_close(v_loss, o_loss.detach(), rtol=0, atol=ATOL, msg=where)
                mask = tokens.response_mask
                torch.testing.assert_close(v_grad * mask, lp.grad * mask, rtol=1e-5, atol=1e-7)
                history = {k: [(1, v)] for k, v in v_metrics.items()}
                points = {p.key: p.value for p in mapped_points(history, benchmarks=(), k=8)}
                assert math.isfinite(points[gm.POLICY_LOSS]), where
                assert gm.APPROX_KL in points, (where, sorted(v_metrics))
