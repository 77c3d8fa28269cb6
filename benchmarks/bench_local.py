"""CPU testbed speed and memory at the quick-start budget (LocalSettings defaults).

Measures, through the real entry point (``python -m gppo.backends.local``, one thread each):
one cell's wall time, CPU time and peak RSS; sampling vs update tokens/s and where a cell's time
goes; and two cells in parallel vs one (throughput ratio; target >= 1.6x on 2 free cores).
``--cprofile`` adds a cProfile of a short in-process cell (top functions by own time).

    .venv/bin/python benchmarks/bench_local.py [--domain math] [--cprofile]

The warm start (base model) is built once before timing and reported separately. On a shared
machine, compare CPU seconds (less sensitive to other load) as well as wall seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _cells import children_cpu_s, ensure_base, run_many

from gppo import metrics as M


def _cell(method: str, seed: int, domain: str, extra: list[str]) -> list[str]:
    return ["--method", method, "--seed", str(seed), "--domain", domain, "--no-mlflow", *extra]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domain", default="math", choices=["math", "code"])
    ap.add_argument("--method", default="grpo")
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    extra = [x for kv in a.set for x in ("--set", kv)]
    ncpu = os.cpu_count()
    load = os.getloadavg()[0]
    print(f"# bench_local: domain={a.domain} method={a.method} cpus={ncpu} load1={load:.1f}")
    t_base = ensure_base(a.domain, extra)
    with tempfile.TemporaryDirectory() as tmp:
        c0 = children_cpu_s()
        t0 = time.perf_counter()
        (one,) = run_many([_cell(a.method, 0, a.domain, extra)], 1, tmp)
        wall1 = time.perf_counter() - t0
        cpu1 = children_cpu_s() - c0
        c0 = children_cpu_s()
        t0 = time.perf_counter()
        two = run_many([_cell(a.method, s, a.domain, extra) for s in (1, 2)], 2, tmp)
        wall2 = time.perf_counter() - t0
        cpu2 = children_cpu_s() - c0
    p = one.summary["perf"]
    other = p[M.PERF_TOTAL_S] - p[M.PERF_BASE_MODEL_S] - p[M.PERF_EVAL_S] - p[M.PERF_TRAIN_S]
    rows = [
        ("base model build (once per sweep), s", t_base if t_base > 5 else 0.0, "cached"),
        ("one cell wall, s (process start to exit)", wall1, "<= 90"),
        ("one cell CPU, s", cpu1, ""),
        (
            "one cell peak RSS, MB",
            max(r.summary["perf"][M.PERF_PEAK_RSS_MB] for r in [one, *two]),
            "<= 1024",
        ),
        ("  in-cell total, s", p[M.PERF_TOTAL_S], ""),
        ("  load base model, s", p[M.PERF_BASE_MODEL_S], ""),
        ("  eval (step 0 + final), s", p[M.PERF_EVAL_S], ""),
        ("  train, s", p[M.PERF_TRAIN_S], ""),
        ("    sampling, s", p[M.PERF_SAMPLE_S], ""),
        ("    update (fwd+bwd+AdamW), s", p[M.PERF_UPDATE_S], ""),
        ("  other in-cell, s", other, ""),
        ("  imports + interpreter, s", wall1 - p[M.PERF_TOTAL_S], ""),
        ("sampling tokens/s", p[M.PERF_SAMPLE_TOKENS_PER_S], ""),
        ("update tokens/s (response tokens)", p[M.PERF_UPDATE_TOKENS_PER_S], ""),
        ("two cells in parallel: wall, s", wall2, ""),
        ("two cells in parallel: CPU, s", cpu2, ""),
        ("throughput ratio 2 cells vs 1 (2*wall1/wall2)", 2 * wall1 / wall2, ">= 1.6"),
        ("CPU-bound ratio on 2 free cores (2*cpu1/(cpu2/2))", 2 * cpu1 / (cpu2 / 2), ">= 1.6"),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"| {'measure':<{w}} | {'value':>9} | target |")
    print(f"|{'-' * (w + 2)}|{'-' * 11}|--------|")
    for name, val, tgt in rows:
        print(f"| {name:<{w}} | {val:>9.1f} | {tgt:<6} |")
    print(
        f"final avg@8 of the timed cell: {one.summary['evals'][max(one.summary['evals'], key=int)]}"
    )
    if a.cprofile:
        _cprofile(a.domain, a.method, a.set)


def _cprofile(domain: str, method: str, sets: list[str]) -> None:
    import cProfile
    import pstats

    import torch

    from gppo.backends.local.__main__ import _parse_value, run_cell
    from gppo.cell import Cell

    torch.set_num_threads(1)
    settings = {
        "domain": domain,
        "steps": 5,
        **{k: _parse_value(v) for k, _, v in (s.partition("=") for s in sets)},
    }
    cell = Cell(
        id="profile",
        method=method,
        seed=0,
        settings=settings,
    )
    prof = cProfile.Profile()
    prof.enable()
    run_cell(cell, None, verbose=False)
    prof.disable()
    print("\n# cProfile of a 5-step cell (top 15 by own time)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
