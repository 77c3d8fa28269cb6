"""Do the trainers agree? The same GPPO cells from the same base, trained by the CPU testbed's own
loop, by verl's whole trainer (``configs/verl-cpu-testbed.yaml``) and by TRL's ``GRPOTrainer``
(``configs/trl-cpu-testbed.yaml``), scored by one evaluator.

    .venv/bin/python benchmarks/cross_trainer.py --seeds 5 --estimators mc atomic \\
        --verl-python .venv-verl-cpu/bin/python --work runs/cross-trainer

The testbed cells run as ``python -m gppo.backends.local`` subprocesses (two at a time); the verl
and TRL cells as one ``gppo-sweep launch`` each of their preset (seeds and grid replaced), verl's
from the verl CPU environment, into ``<work>/<trainer>/mlflow.db``: relaunching resumes a sweep
(finished cells are kept), so an interrupted benchmark loses at most the cells that were running.
``--trainers testbed trl`` runs a subset; ``--read-only verl`` reads a sweep as it stands.

Both sides score the base (step 0) and the final policy with the testbed's evaluator (avg@8, seed
1234), so the gain (final - base, in points) is on one scale. Printed: per trainer and cell, the
mean gain with a 95% t-interval over seeds; per cell, the difference of gains (verl - testbed)
with a Welch 95% interval and its p-value. An interval that contains 0 means the data do not
separate the trainers at this number of seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from scipy import stats

sys.path.insert(0, os.path.dirname(__file__))
from _cells import run_many

from gppo import metrics as M

REPO = Path(__file__).resolve().parents[1]
KEY = M.eval_domain_metric(8)


def t_interval(xs: list[float]) -> tuple[float, float, float]:
    """(mean, lo, hi): the 95% t-interval of the mean (no width with one value)."""
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, float("nan"), float("nan")
    h = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5
    return m, m - h, m + h


def welch(a: list[float], b: list[float]) -> tuple[float, float, float, float]:
    """(mean(a) - mean(b), lo, hi, p): Welch's 95% interval and two-sided p-value."""
    d = statistics.mean(a) - statistics.mean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = (va + vb) ** 0.5
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    h = stats.t.ppf(0.975, df) * se
    p = stats.ttest_ind(a, b, equal_var=False).pvalue
    return d, d - h, d + h, float(p)


def testbed_gains(estimators: list[str], seeds: int, parallel: int) -> dict[str, list[tuple]]:
    """``{cell: [(seed, base, final), ...]}`` from the testbed's own loop."""
    jobs = [
        [
            *("--method", "gppo", "--divergence", "tv", "--estimator", e, "--seed", str(s)),
            *("--domain", "math", "--no-mlflow"),
        ]
        for e in estimators
        for s in range(seeds)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        results = run_many(jobs, parallel, tmp)
    out: dict[str, list[tuple]] = {}
    for job, res in zip(jobs, results, strict=True):
        evals = res.summary["evals"]
        steps = sorted(evals, key=int)
        cell = f"tv/{job[5]}"
        out.setdefault(cell, []).append((int(job[7]), evals[steps[0]][KEY], evals[steps[-1]][KEY]))
    return out


#: the trainers run as sweeps: preset, the section holding the step count, its key
SWEEPS = {
    "verl": (REPO / "configs" / "verl-cpu-testbed.yaml", "verl", "total_steps"),
    "trl": (REPO / "configs" / "trl-cpu-testbed.yaml", "trl", "steps"),
}


def sweep_spec(work: Path, trainer: str, estimators: list[str], seeds: int) -> Path:
    preset, _, _ = SWEEPS[trainer]
    spec = yaml.safe_load(preset.read_text())
    spec["name"] = f"cross-trainer-{trainer}"
    spec["grid"] = {"divergences": ["tv"], "estimators": estimators}
    spec["seeds"] = seeds
    spec["tracking"] = {"uri": f"sqlite:///{work}/mlflow.db"}
    if trainer == "trl":
        spec["trl"]["checkpoint_dir"] = str(work / "checkpoints")
    path = work / "grid.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_sweep(spec: Path, python: str) -> None:
    gppo_sweep = Path(python).parent / "gppo-sweep"
    subprocess.run([str(gppo_sweep), "launch", str(spec)], cwd=spec.parent, check=True)


def sweep_gains(spec: Path, trainer: str) -> dict[str, list[tuple]]:
    """``{cell: [(seed, base, final), ...]}`` from a sweep's finished runs."""
    from mlflow import MlflowClient

    raw = yaml.safe_load(spec.read_text())
    client = MlflowClient(raw["tracking"]["uri"])
    _, section, key = SWEEPS[trainer]
    final_step = raw[section][key]
    out: dict[str, list[tuple]] = {}
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id], max_results=1000):
            tags = run.data.tags
            if tags.get(M.TAG_ROLE) != M.ROLE_CELL or tags.get(M.TAG_FINISHED) != "true":
                continue
            history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, KEY)}
            if 0 not in history or final_step not in history:
                continue
            cell = f"{tags[M.TAG_DIVERGENCE]}/{tags[M.TAG_ESTIMATOR]}"
            out.setdefault(cell, []).append(
                (int(tags[M.TAG_SEED]), history[0], history[final_step])
            )
    return {cell: sorted(rows) for cell, rows in out.items()}


def pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:+.1f}"


def report(results: dict[str, dict[str, list[tuple]]]) -> str:
    lines = [
        "| trainer | cell | seeds | base avg@8 | final avg@8 | gain (points) | 95% CI |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for trainer, cells in results.items():
        for cell, rows in sorted(cells.items()):
            gains = [f - b for _, b, f in rows]
            m, lo, hi = t_interval(gains)
            base = statistics.mean(b for _, b, _ in rows)
            final = statistics.mean(f for _, _, f in rows)
            lines.append(
                f"| {trainer} | {cell} | {len(rows)} | {100 * base:.1f} | {100 * final:.1f} | "
                f"{pct(m)} | [{pct(lo)}, {pct(hi)}] |"
            )
    lines += [
        "",
        "| cell | gain difference (points) | Welch 95% CI | p |",
        "| --- | --- | --- | --- |",
    ]
    testbed = results.get("testbed", {})
    for trainer in (t for t in results if t != "testbed"):
        other = results[trainer]
        for cell in sorted(set(other) & set(testbed)):
            a = [f - b for _, b, f in other[cell]]
            b = [f - b0 for _, b0, f in testbed[cell]]
            if len(a) < 2 or len(b) < 2:
                continue
            d, lo, hi, p = welch(a, b)
            lines.append(
                f"| {cell}: {trainer} - testbed | {pct(d)} | [{pct(lo)}, {pct(hi)}] | {p:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--estimators", nargs="+", default=["mc", "atomic"])
    ap.add_argument("--trainers", nargs="+", default=["testbed", *SWEEPS], help="which to run")
    ap.add_argument("--parallel", type=int, default=2, help="testbed cells at a time")
    ap.add_argument("--verl-python", default=str(REPO / ".venv-verl-cpu" / "bin" / "python"))
    ap.add_argument(
        "--trl-python", default=sys.executable, help="an environment with the trl extra"
    )
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "cross-trainer")
    ap.add_argument("--read-only", nargs="*", default=[], help="sweeps read as they stand")
    a = ap.parse_args()
    results: dict[str, dict[str, list[tuple]]] = {}
    saved = a.work.resolve() / "testbed.json"  # the testbed's gains, kept for --read-only testbed
    if "testbed" in a.trainers:
        results["testbed"] = testbed_gains(a.estimators, a.seeds, a.parallel)
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(results["testbed"]))
    elif "testbed" in a.read_only and saved.exists():
        results["testbed"] = {
            c: [tuple(r) for r in rows] for c, rows in json.loads(saved.read_text()).items()
        }
    for trainer in (t for t in SWEEPS if t in a.trainers or t in a.read_only):
        work = a.work.resolve() / trainer
        work.mkdir(parents=True, exist_ok=True)
        spec = sweep_spec(work, trainer, a.estimators, a.seeds)
        if trainer not in a.read_only:
            run_sweep(spec, getattr(a, f"{trainer}_python"))
        results[trainer] = sweep_gains(spec, trainer)
    for trainer, cells in results.items():
        for cell, rows in sorted(cells.items()):
            for seed, base, final in rows:
                print(f"{trainer} {cell} seed {seed}: base {base:.4f} final {final:.4f}")
    print()
    print(report(results))


if __name__ == "__main__":
    main()
