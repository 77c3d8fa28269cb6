"""Is the warm start robust? Build the base model for several warm-start seeds at 1 and 2 threads
(another float reduction order) and report each base's avg@8 per benchmark.

    .venv/bin/python benchmarks/base_robustness.py [--domain math] [--seeds 5] [--threads 1 2]
        [--parallel 2] [--json out.json] [--set KEY=VALUE ...]

With ``--json``, each build is appended to the file as it finishes and builds already in it are
not repeated (a long measurement resumes where it stopped).

Every build is the real ``train_base`` of the default settings (with ``warmstart_seed`` varied),
in its own process; the spread (max - min of the domain mean) is what docs/studies/base-robustness.md
reports.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import psutil


def _parse(kv: str) -> tuple[str, Any]:
    key, _, value = kv.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def build_one(domain: str, seed: int, threads: int, extra: dict[str, Any]) -> dict[str, Any]:
    import torch

    from gppo.backends.local.settings import LocalSettings
    from gppo.testbed.evaluate import evaluate
    from gppo.testbed.tasks import get_domain
    from gppo.testbed.warmstart import train_base

    torch.set_num_threads(threads)
    s = LocalSettings(domain=domain, warmstart_seed=seed, **extra)
    t0 = time.perf_counter()
    policy, run = train_base(s)
    # the shipped weights are float16: evaluate what would be shipped
    policy.load_state_dict({k: v.half().float() for k, v in policy.state_dict().items()})
    d = get_domain(domain)
    scores = evaluate(policy, d, d.benchmark_names, 8, s.eval_seed)
    return {
        "seed": seed,
        "threads": threads,
        "steps": run.steps,
        "restarts": run.restarts,
        "validation": run.validation,
        "reached": run.reached,
        "seconds": time.perf_counter() - t0,
        "checks": run.checks,
        "scores": scores,
        "mean": sum(scores.values()) / len(scores),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domain", default="math")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    extra = dict(_parse(kv) for kv in a.set)
    done: list[dict[str, Any]] = []
    if a.json and os.path.exists(a.json):
        with open(a.json) as fh:
            done = json.load(fh)
    have = {(r["seed"], r["threads"]) for r in done}
    jobs = [
        (a.domain, s, t, extra) for s in range(a.seeds) for t in a.threads if (s, t) not in have
    ]
    # SIGTERM (kill, pkill) ends the measurement like Ctrl-C: the builds are stopped too (a
    # pool's worker processes otherwise outlive their parent and keep the cores busy)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ProcessPoolExecutor(a.parallel, mp_context=mp.get_context("spawn")) as pool:
        try:
            _collect(pool, jobs, done, a.json)
        except BaseException:
            for child in psutil.Process().children(recursive=True):
                child.kill()
            raise
    _print_table(done)


def _collect(
    pool: ProcessPoolExecutor, jobs: list[tuple], done: list[dict[str, Any]], out: str | None
) -> None:
    """Run the builds, appending each result to ``done`` (and to ``out``) as it finishes."""
    for fut in as_completed([pool.submit(build_one, *job) for job in jobs]):
        r = fut.result()
        done.append(r)
        print(f"built seed {r['seed']} threads {r['threads']}: mean {r['mean']:.3f}", flush=True)
        if out:
            with open(out, "w") as fh:
                json.dump(done, fh, indent=1)


def _print_table(done: list[dict[str, Any]]) -> None:
    rows = sorted(done, key=lambda r: (r["seed"], r["threads"]))
    names = list(rows[0]["scores"])
    print(
        f"| seed | threads | steps | restarts | validation | {' | '.join(names)} | mean | build s |"
    )
    print("|" + " --- |" * (len(names) + 7))
    for r in rows:
        cells = " | ".join(f"{100 * r['scores'][n]:.1f}" for n in names)
        print(
            f"| {r['seed']} | {r['threads']} | {r['steps']}{'' if r['reached'] else ' (cap)'} | "
            f"{len(r.get('restarts', []))} | "
            f"{100 * (r['validation'] or 0):.1f} | {cells} | **{100 * r['mean']:.1f}** | "
            f"{r['seconds']:.0f} |"
        )
    means = [100 * r["mean"] for r in rows]
    print(
        f"\ndomain mean over {len(rows)} builds: {statistics.mean(means):.1f} "
        f"(sd {statistics.stdev(means):.1f}), spread max - min {max(means) - min(means):.1f} points"
    )


if __name__ == "__main__":
    main()
