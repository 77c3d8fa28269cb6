"""Speed and peak memory of every GPPO cell and baseline against verl's ``vanilla`` PPO loss.

    .venv/bin/python benchmarks/bench_objectives.py            # B x T = 512 x 2048, float32, CPU
    .venv/bin/python benchmarks/bench_objectives.py --quick    # 64 x 512
    .venv/bin/python benchmarks/bench_objectives.py --no-memory --save before.json
    .venv/bin/python benchmarks/bench_objectives.py --no-memory --baseline before.json

Time: forward + backward of each loss on the same tensors, all losses interleaved round by round
(the machine may be shared), after a warm-up round (the warm-up builds the per-cell region
tables, a one-off per (cell, delta)). Every time is a ratio to verl's ``vanilla`` measured in
the same rounds: ``wall / vanilla`` and ``CPU / vanilla`` (process CPU time) of the medians over
``--repeats`` rounds, and ``best / vanilla`` of the fastest round of each (the least disturbed
by other load). On a shared machine read both, and prefer ``--threads 1``: under contention
every parallel region waits for its slowest thread, which swamps the ratios. Context rows:
verl's ``dppo_tv`` / ``dppo_kl`` and a bare exp-multiply-mean pass (the floor for any such
loss). The last line names the slowest GPPO cell.

Before/after: ``--save FILE`` writes the run (ratios, settings, CPU) as JSON; ``--baseline FILE``
prints, after the table, each row's ratios in that run next to this one's (each against the
``vanilla`` of its own run, so two runs on one machine compare even under different load).

Memory: torch has no allocator statistics for CPU tensors (and tracemalloc does not see them), so
each loss runs in its own subprocess with glibc's mmap threshold fixed at 64 KiB
(MALLOC_MMAP_THRESHOLD_: every tensor buffer is its own mapping, returned to the OS when freed,
so the RSS follows live tensors). The child builds the same tensors, runs the loss once on a
small shape (lazy initialisation, region tables), resets the kernel's peak-RSS mark
(/proc/self/clear_refs, Linux), runs forward + backward at the full shape and reports
VmHWM - VmRSS: the loss's own peak working set on top of its inputs (graph, saved tensors,
temporaries, gradient). Divided by the same figure for ``vanilla``.

The data: mu = exp(old_log_prob) mixes confident tokens (mu > 0.9, 70%) and rare ones
(log mu down to -8); pi moves from mu by a logit perturbation of scale 0.2 (so pi < 1 and
|log r| is small, as after one optimisation step); sequence-level advantages; random lengths.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from gppo.objectives import gppo_policy_loss
from gppo.objectives.divergences import paper_divergences
from gppo.objectives.estimators import paper_estimators
from gppo.objectives.methods import baseline_names, get_method

GRID = [(d, e) for d in paper_divergences() for e in paper_estimators()]
EXTENSIONS = [(d, e) for d in ("rkl", "js", "alpha:0.5") for e in ("mc", "atomic", "binary")]
BASELINES = baseline_names()

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor], tuple[torch.Tensor, dict]]


def make_data(b: int, t: int, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    confident = torch.rand(b, t, generator=g) < 0.7
    log_mu = torch.where(
        confident,
        torch.log(1 - 0.1 * torch.rand(b, t, generator=g)),
        -8.0 * torch.rand(b, t, generator=g) - 0.1,
    ).clamp(max=-1e-6)
    logit = log_mu - torch.log(-torch.expm1(log_mu))
    new_logit = logit + 0.2 * torch.randn(b, t, generator=g)
    log_pi = torch.nn.functional.logsigmoid(new_logit)
    adv = torch.randn(b, 1, generator=g).expand(b, t).contiguous()
    lengths = torch.randint(t // 4, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    return log_mu.float(), log_pi.float(), adv.float(), mask


def losses(data: Batch, names: list[str] | None = None) -> dict[str, LossFn]:
    """The losses to compare, by row name (verl is imported only if one of its rows is asked)."""
    old, _, adv, mask = data
    out: dict[str, LossFn] = {}
    want = (lambda k: True) if names is None else (lambda k: k in names)
    if any(want(k) for k in ("verl vanilla", "verl dppo_tv", "verl dppo_kl")):
        from verl.trainer.ppo.core_algos import get_policy_loss_fn
        from verl.workers.config import ActorConfig

        base = {"strategy": "fsdp", "rollout_n": 1, "ppo_micro_batch_size_per_gpu": 1}

        def cfg(eps: float, c: float) -> ActorConfig:
            return ActorConfig(
                **base, clip_ratio=eps, clip_ratio_low=eps, clip_ratio_high=eps, clip_ratio_c=c
            )

        for key, mode, conf in (
            ("verl vanilla", "vanilla", cfg(0.2, 10.0)),
            ("verl dppo_tv", "dppo_tv", cfg(0.1, 20.0)),
            ("verl dppo_kl", "dppo_kl", cfg(0.2, 20.0)),
        ):
            fn = get_policy_loss_fn(mode)
            out[key] = lambda lp, fn=fn, conf=conf: fn(old, lp, adv, mask, "token-mean", conf)
    out["floor exp*A mean"] = lambda lp: ((-torch.exp(lp - old) * adv).mean(), {})
    for d, e in GRID + EXTENSIONS:
        out[f"{d}/{e}"] = lambda lp, d=d, e=e: gppo_policy_loss(
            old, lp, adv, mask, divergence=d, estimator=e
        )
    for name in BASELINES:
        out[name] = lambda lp, name=name: get_method(name).loss(old, lp, adv, mask)
    return {k: v for k, v in out.items() if want(k)}


def run_once(fn: LossFn, log_prob: torch.Tensor) -> tuple[float, float]:
    lp = log_prob.clone().requires_grad_(True)
    w0, c0 = time.perf_counter(), time.process_time()
    loss, _ = fn(lp)
    loss.backward()
    return time.perf_counter() - w0, time.process_time() - c0


def time_all(
    data: Batch, repeats: int, names: list[str] | None
) -> dict[str, tuple[float, float, float]]:
    """Per row: (median wall s, median CPU s, fastest wall s) over ``repeats`` interleaved rounds."""
    fns = losses(data, names)
    new = data[1]
    for fn in fns.values():  # warm-up: lazy init, region tables
        run_once(fn, new)
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for rep in range(repeats):
        order = list(fns) if rep % 2 == 0 else list(reversed(fns))
        for k in order:
            w, c = run_once(fns[k], new)
            wall[k].append(w)
            cpu[k].append(c)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k]), min(wall[k])) for k in fns}


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0  # kB
    raise RuntimeError(f"{key} not in /proc/self/status")


def mem_child(name: str, b: int, t: int) -> None:
    """Peak RSS growth of one forward + backward (run with MALLOC_MMAP_THRESHOLD_ fixed, so
    every tensor buffer is its own mapping and freed memory leaves the RSS at once)."""
    small = make_data(8, 64)
    run_once(losses(small, [name])[name], small[1])
    data = make_data(b, t)
    fn = losses(data, [name])[name]
    log_prob = data[1].clone().requires_grad_(True)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:  # reset the peak (VmHWM) to the current RSS
        fh.write("5")
    before = _status_mb("VmRSS")
    loss, _ = fn(log_prob)
    loss.backward()
    print(json.dumps({"name": name, "peak_mb": _status_mb("VmHWM") - before}))


def mem_all(names: list[str], b: int, t: int, threads: int | None) -> dict[str, float]:
    out = {}
    extra = ["--threads", str(threads)] if threads else []
    for name in names:
        proc = subprocess.run(
            [sys.executable, __file__, "--mem-child", name, "--shape", str(b), str(t), *extra],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"},
        )
        out[name] = json.loads(proc.stdout.strip().splitlines()[-1])["peak_mb"]
    return out


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; else what platform knows)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def ratios(
    times: dict[str, tuple[float, float, float]], mems: dict[str, float]
) -> dict[str, dict[str, float]]:
    """Per row: its times (ms), peak (MB) and each divided by ``verl vanilla``'s of the run."""
    vw, vc, vb = times["verl vanilla"]
    vm = mems.get("verl vanilla", math.nan)
    out = {}
    for k, (w, c, b) in times.items():
        m = mems.get(k, math.nan)
        out[k] = {
            "wall_ms": w * 1e3,
            "wall": w / vw,
            "best": b / vb,
            "cpu": c / vc,
            "peak_mb": m,
            "peak": m / vm if vm > 0 else math.nan,
        }
    return out


def _f(x: float, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if math.isnan(x) else f"{x:{width}.{digits}f}"


def print_table(rows: dict[str, dict[str, float]]) -> None:
    head = ["wall ms", "wall / vanilla", "best / vanilla", "CPU / vanilla", "peak MB"]
    head.append("peak / vanilla")
    print(f"| {'loss':<18} | " + " | ".join(head) + " |")
    print(f"| {'-' * 18} | " + " | ".join("-" * (len(h) - 1) + ":" for h in head) + " |")
    for k, v in rows.items():
        cells = [_f(v["wall_ms"], 7, 1), _f(v["wall"], 14, 2), _f(v["best"], 14, 2)]
        cells += [_f(v["cpu"], 13, 2), _f(v["peak_mb"], 7, 1), _f(v["peak"], 14, 2)]
        print(f"| {k:<18} | " + " | ".join(cells) + " |")


def print_comparison(before: dict, rows: dict[str, dict[str, float]]) -> None:
    """Each row's ratios to vanilla in the baseline run and in this one."""
    b_rows = before["rows"]
    print(f"\nbefore: {before['header']}")
    head = ["wall / v before", "wall / v after", "best / v before", "best / v after"]
    head += ["CPU / v before", "CPU / v after"]
    print(f"| {'loss':<18} | " + " | ".join(head) + " |")
    print(f"| {'-' * 18} | " + " | ".join("-" * (len(h) - 1) + ":" for h in head) + " |")
    nan = {"wall": math.nan, "best": math.nan, "cpu": math.nan}
    for k, v in rows.items():
        b = b_rows.get(k, nan)
        cells = []
        for key, h in zip(("wall", "wall", "best", "best", "cpu", "cpu"), head, strict=True):
            cells.append(_f((b if h.endswith("before") else v)[key], len(h), 2))
        print(f"| {k:<18} | " + " | ".join(cells) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="B x T = 64 x 512")
    p.add_argument("--shape", nargs=2, type=int, metavar=("B", "T"))
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--only", help="comma-separated row names (verl vanilla is always kept)")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--save", metavar="FILE", help="write this run's ratios as JSON")
    p.add_argument("--baseline", metavar="FILE", help="a --save file: print before/after")
    p.add_argument("--mem-child", help=argparse.SUPPRESS)
    a = p.parse_args()
    b, t = a.shape or ((64, 512) if a.quick else (512, 2048))
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.mem_child:
        mem_child(a.mem_child, b, t)
        return
    data = make_data(b, t)
    names = None if not a.only else ["verl vanilla", *a.only.split(",")]
    times = time_all(data, a.repeats, names)
    mems = {} if a.no_memory else mem_all(list(times), b, t, a.threads)
    rows = ratios(times, mems)
    vw, vc, vb = times["verl vanilla"]
    vm = mems.get("verl vanilla", math.nan)
    header = (
        f"B x T = {b} x {t} float32, {cpu_model()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {a.repeats} interleaved rounds; verl vanilla = "
        f"{vw * 1e3:.1f} ms wall (median), {vb * 1e3:.1f} ms (best), {vc * 1e3:.1f} ms CPU, "
        f"{vm:.1f} MB peak"
    )
    print(header)
    print_table(rows)
    gppo_cells = {k: v for k, v in rows.items() if k in {f"{d}/{e}" for d, e in GRID + EXTENSIONS}}
    if gppo_cells:
        worst = max(gppo_cells, key=lambda k: gppo_cells[k]["best"])
        w = gppo_cells[worst]
        print(
            f"slowest GPPO cell: {worst} at {w['best']:.2f}x vanilla (best), "
            f"{w['wall']:.2f}x (median wall), {w['cpu']:.2f}x (CPU)"
        )
    if a.baseline:
        with open(a.baseline) as fh:
            print_comparison(json.load(fh), rows)
    if a.save:
        with open(a.save, "w") as fh:
            json.dump({"header": header, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
