"""The GPU check's pieces that run anywhere (scripts/gpu-check.sh itself needs a GPU): its copy of
verl's vanilla arithmetic is verl's ``compute_policy_loss_vanilla`` (values, gradient, metrics),
and the benchmark runs every grid cell with a float32 loss."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gppo.backends.verl import gpucheck


def test_vanilla_copy_is_verls_vanilla(math_actors):
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    _, actor = math_actors["tv-mc-s0"]
    actor = dataclasses.replace(actor, clip_ratio_low=0.2, clip_ratio_high=0.2)
    actor.global_batch_info.clear()
    old, new, adv, mask = gpucheck._inputs(6, 40, "cpu", seed=3)
    g = torch.Generator().manual_seed(0)
    new = (new.float() + 0.3 * torch.randn(new.shape, generator=g)).clamp(max=0)  # some clip
    a = new.clone().requires_grad_(True)
    b = new.clone().requires_grad_(True)
    v_loss, v_m = compute_policy_loss_vanilla(old, a, adv, mask, "token-mean", actor)
    c_loss, c_m = gpucheck.vanilla_loss(old, b, adv, mask, clip=0.2, clip_c=actor.clip_ratio_c)
    v_loss.backward()
    c_loss.backward()
    torch.testing.assert_close(c_loss, v_loss, rtol=0, atol=1e-7)
    torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=1e-9)
    assert v_m["actor/pg_clipfrac"] > 0
    for key, value in c_m.items():
        assert v_m[f"actor/{key}"] == pytest.approx(value, abs=1e-6)


def test_benchmark_rows_for_every_cell():
    rows = gpucheck.bench_losses(4, 32, "cpu", repeats=1)
    assert len(gpucheck.paper_grid()) == 12  # the paper's 4 x 3
    want = ["verl vanilla (copy)"] + [f"{d}/{e}" for d, e in gpucheck.paper_grid()]
    assert [r["loss"] for r in rows] == want
    assert all(r["ms"] > 0 and r["ratio"] > 0 for r in rows)
