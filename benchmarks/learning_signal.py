"""Is the RL signal real? Base vs trained avg@8 over 3 seeds (GRPO = gppo tv/mc), per domain,
and the clip fractions per μ bucket of mc, atomic and binary cells, at the quick-start budget.

    .venv/bin/python benchmarks/learning_signal.py [--domains math code] [--seeds 3]
        [--divergence tv] [--parallel 2] [--set KEY=VALUE ...]

Every cell runs through the real entry point (``python -m gppo.backends.local``); the base row
is each cell's step-0 evaluation (the shared cached base model, fixed evaluation seed, so it is
identical across seeds); the trained row is the final evaluation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _cells import ensure_base, run_many

from gppo import metrics as M

BUCKETS = [b for b, _, _ in M.MU_BUCKETS]


def _ms(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3f} ± {sd:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", nargs="+", default=["math", "code"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--divergence", default="tv")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    extra = [x for kv in a.set for x in ("--set", kv)]
    k = M.eval_domain_metric(8)
    for domain in a.domains:
        ensure_base(domain, extra)
        jobs, names = [], []
        for s in range(a.seeds):
            jobs.append(
                ["--method", "grpo", "--seed", str(s), "--domain", domain, "--no-mlflow", *extra]
            )
            names.append(("grpo", s))
        for est in ("mc", "atomic", "binary"):
            jobs.append(
                [
                    "--method",
                    "gppo",
                    "--divergence",
                    a.divergence,
                    "--estimator",
                    est,
                    "--seed",
                    "0",
                    "--domain",
                    domain,
                    "--no-mlflow",
                    *extra,
                ]
            )
            names.append((f"{a.divergence}-{est}", 0))
        with tempfile.TemporaryDirectory() as tmp:
            res = run_many(jobs, a.parallel, tmp)
        grpo = [r for r, (n, _) in zip(res, names, strict=False) if n == "grpo"]
        base = [r.summary["evals"]["0"][k] for r in grpo]
        final = [r.summary["evals"][max(r.summary["evals"], key=int)][k] for r in grpo]
        print(f"\n## {domain}: domain avg@8, GRPO (tv/mc), {a.seeds} seeds")
        print("| | mean ± std | per seed |")
        print("|---|---|---|")
        print(f"| base (step 0) | {_ms(base)} | {', '.join(f'{x:.3f}' for x in base)} |")
        print(f"| trained (final) | {_ms(final)} | {', '.join(f'{x:.3f}' for x in final)} |")
        gain = [f - b for f, b in zip(final, base, strict=False)]
        print(f"| gain | {_ms(gain)} | {', '.join(f'{x:+.3f}' for x in gain)} |")
        benches = [key for key in grpo[0].summary["evals"]["0"] if key.count("/") == 2]
        print(
            "\nper benchmark (seed mean): "
            + ", ".join(
                f"{b.split('/')[1]} {statistics.mean(r.summary['evals']['0'][b] for r in grpo):.3f}"
                f" -> {statistics.mean(r.summary['evals'][max(r.summary['evals'], key=int)][b] for r in grpo):.3f}"
                for b in benches
            )
        )
        wall = [r.wall_s for r in res]
        print(
            f"cell wall time: mean {statistics.mean(wall):.1f}s, max {max(wall):.1f}s ({a.parallel} in parallel)"
        )
        print(
            f"\n## {domain}: clip fractions (mean over steps; all tokens, then per μ bucket), seed 0"
        )
        print(
            "| cell | final avg@8 | clip low | clip high | "
            + " | ".join(BUCKETS)
            + " | approx KL | ratio max |"
        )
        print("|---" * (6 + len(BUCKETS)) + "|")
        for r, (n, _s) in zip(res, names, strict=False):
            if n == "grpo":
                continue
            h = r.summary["history"]

            def avg(key: str, hist=h) -> float:
                vals = [row[key] for row in hist if key in row]
                return statistics.mean(vals) if vals else float("nan")

            fin = r.summary["evals"][max(r.summary["evals"], key=int)][k]
            print(
                f"| {n} | {fin:.3f} | {avg('clip_frac_low'):.4f} | {avg('clip_frac_high'):.4f} | "
                + " | ".join(f"{avg('clip_frac/' + b):.4f}" for b in BUCKETS)
                + f" | {avg('approx_kl'):.2e} | {max(row.get('ratio_max', 0) for row in h):.2f} |"
            )


if __name__ == "__main__":
    main()
