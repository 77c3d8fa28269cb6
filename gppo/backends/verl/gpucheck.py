"""The GPU check behind ``scripts/gpu-check.sh`` (one GPU, torch + transformers + CUDA; verl,
Ray, MLflow and vLLM may be missing). Run as a script (``python gppo/backends/verl/gpucheck.py
--out DIR``) so that nothing but torch is needed for the loss benchmark; each section records
what it measured, or the exact call and error that stopped it, in ``DIR/gpu-check.json``:

1. ``loss``: every GPPO grid cell's loss forward+backward on (B, T) = (512, 8192), bf16 log pi
   (as the engine passes it) and float32 log mu / A, timed with CUDA events (median of repeats)
   against a copy of verl's ``vanilla`` arithmetic (``compute_policy_loss_vanilla``, token-mean),
   with the ratio to vanilla and the peak memory above the inputs;
2. ``engine``: if verl's FSDP engine imports here, one bf16 ``FSDPEngineWithLMHead`` step with
   ``ppo_loss`` / loss mode ``gppo`` on a small random Qwen2 (micro-batched vs whole batch,
   parameters move, metrics include our clip diagnostics);
3. ``testbed``: the local testbed has no device setting (CPU only): recorded as not applicable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch


def paper_grid() -> list[tuple[str, str]]:
    """The paper's 4 x 3 cells (divergence, estimator), read from the registries."""
    from gppo.objectives.divergences import paper_divergences
    from gppo.objectives.estimators import paper_estimators

    return [(d, e) for d in paper_divergences() for e in paper_estimators()]


def vanilla_loss(old_log_prob, log_prob, advantages, response_mask, clip=0.2, clip_c=10.0):
    """verl 0.9.1 ``compute_policy_loss_vanilla`` (token-mean, one rank), line for line: PPO
    clip at 1 +- ``clip``, dual clip ``clip_c`` for A < 0, its three metrics (one host sync)."""
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    n = response_mask.sum() + 1e-8
    ppo_kl = (-neg_kl * response_mask).sum() / n
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1 - clip, 1 + clip)
    clip1 = torch.maximum(pg1, pg2)
    clipfrac = (torch.gt(pg2, pg1).float() * response_mask).sum() / n
    pg3 = -advantages * clip_c
    clip2 = torch.min(pg3, clip1)
    clipfrac_low = ((torch.gt(clip1, pg3) * (advantages < 0).float()) * response_mask).sum() / n
    losses = torch.where(advantages < 0, clip2, clip1)
    loss = (losses * response_mask).sum() / response_mask.sum()
    metrics = torch.stack([clipfrac, ppo_kl, clipfrac_low]).tolist()
    return loss, dict(zip(("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"), metrics, strict=True))


def _inputs(b: int, t: int, device: str, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    old = torch.where(
        torch.rand(b, t, generator=g) < 0.4,
        -0.05 * torch.rand(b, t, generator=g),
        -5 * torch.rand(b, t, generator=g),
    )
    new = (old + 0.1 * torch.randn(b, t, generator=g)).clamp(max=0.0)
    adv = torch.randn(b, 1, generator=g).expand(b, t).contiguous()
    lengths = torch.randint(t // 4, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    return [x.to(device) for x in (old, new.bfloat16(), adv, mask)]


def _time(fn, device: str, repeats: int) -> tuple[float, float]:
    """(median ms, peak MiB above the inputs) of ``fn()`` (forward + backward)."""
    cuda = device.startswith("cuda")
    times = []
    for i in range(repeats + 2):  # two warm-up runs
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        if i >= 2:
            times.append((time.perf_counter() - start) * 1e3)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else float("nan")
    return statistics.median(times), peak


def bench_losses(b: int, t: int, device: str, repeats: int = 10) -> list[dict[str, Any]]:
    """Forward+backward time and peak memory of vanilla and every grid cell on (b, t)."""
    from gppo.objectives import gppo_policy_loss

    old, new, adv, mask = _inputs(b, t, device)

    def run(loss_fn):
        def once():
            lp = new.detach().requires_grad_(True)
            loss, _ = loss_fn(old, lp, adv, mask)
            loss.backward()
            assert loss.dtype == torch.float32

        return once

    rows = []
    ms, peak = _time(run(lambda o, lp, a, m: vanilla_loss(o, lp.float(), a, m)), device, repeats)
    rows.append({"loss": "verl vanilla (copy)", "ms": ms, "peak_mib": peak, "ratio": 1.0})
    for div, est in paper_grid():
        fn = run(
            lambda o, lp, a, m, d=div, e=est: gppo_policy_loss(
                o, lp, a, m, divergence=d, estimator=e
            )
        )
        ms_c, peak_c = _time(fn, device, repeats)
        rows.append({"loss": f"{div}/{est}", "ms": ms_c, "peak_mib": peak_c, "ratio": ms_c / ms})
    return rows


def engine_section(device: str) -> dict[str, Any]:
    """One bf16 engine step on a small random Qwen2 with loss mode gppo (needs verl)."""
    from gppo.backends.verl import enginecheck as ec
    from gppo.backends.verl.engine import build_engine, init_single_process_group
    from gppo.backends.verl.tiny import tiny_causal_lm

    if device == "cpu":  # no GPU here: verl needs our CPU platform before its engine module
        from gppo.backends.verl.cpu.platform import install_cpu_platform

        install_cpu_platform()
    from verl.workers.config import ActorConfig

    import gppo.backends.verl.plugin  # noqa: F401  (loss mode gppo)
    from gppo.backends.verl.plugin import GPPOPolicyLossConfig

    init_single_process_group()
    path = tiny_causal_lm(Path(tempfile.mkdtemp()) / "qwen2", vocab_size=512, hidden=256, layers=4)
    engine = build_engine(path, param_dtype="bf16")
    actor = ActorConfig(
        strategy="fsdp2",
        rollout_n=1,
        ppo_mini_batch_size=16,
        ppo_micro_batch_size_per_gpu=4,
        use_dynamic_bsz=False,
        policy_loss=GPPOPolicyLossConfig(divergence="kl", estimator="binary", delta=0.2231),
    )
    data = ec.engine_batch(
        engine, batch_size=16, response_len=64, prompt_len=16, vocab_size=512, spread=1.0
    )
    whole = ec.engine_step(engine, data, actor, take_step=False)
    step = ec.engine_step(engine, data, actor, micro_batch_size=4)
    return {
        "loss_whole": whole.loss,
        "loss_micro": step.loss,
        "n_micro": step.n_micro,
        "rel_grad_err_micro_vs_whole": ec.relative_grad_error(step.grads, whole.grads),
        "max_param_change": step.max_param_change,
        "metrics": {k: v for k, v in step.metrics.items() if k.startswith("actor/clip_frac")},
    }


def _section(name: str, fn, report: dict[str, Any]) -> None:
    start = time.perf_counter()
    try:
        report[name] = {"ok": True, **fn()}
    except Exception as exc:
        report[name] = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "where": traceback.format_exc(limit=-3),
        }
    report[name]["seconds"] = round(time.perf_counter() - start, 1)
    print(
        f"[gpu-check] {name}: {'ok' if report[name]['ok'] else report[name]['error']}", flush=True
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--b", type=int, default=512)
    parser.add_argument("--t", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "shape": [args.b, args.t],
    }
    _section(
        "loss", lambda: {"rows": bench_losses(args.b, args.t, args.device, args.repeats)}, report
    )
    if report["loss"]["ok"]:
        for row in report["loss"]["rows"]:
            print(
                f"  {row['loss']:<22} {row['ms']:9.2f} ms  x{row['ratio']:5.2f}  peak {row['peak_mib']:9.1f} MiB"
            )
    _section("engine", lambda: engine_section(args.device), report)
    report["testbed"] = {
        "ok": None,
        "note": "not applicable: the local testbed (gppo.backends.local) has no device setting; it runs on CPU",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "loss"}, indent=1), flush=True)
    return 0 if report["loss"]["ok"] else 1


if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[3])  # the repo, not this folder
    sys.exit(main())
