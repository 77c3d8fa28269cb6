"""Adaptive seeds by running (issue 48): an adaptive sweep against the same grid at a fixed
``max`` seeds, both launched on the same machine, one after the other.

    python benchmarks/adaptive_live.py --fixed FIXED.yaml --adaptive ADAPTIVE.yaml

Both specs must have been launched, each in its own store or experiment (a spec without
``tracking.uri``: ``mlflow.db`` beside the spec file, where ``launch`` in its folder puts it). Prints, as
tables: the runs and CPU-h each used (a run's CPU-h: the cores it held x its wall time, every
attempt; cells on an identical cell's runs cost nothing), and for every row of Table 1 the
adaptive sweep's decision (its seeds and why it stopped) beside the fixed sweep's (Table 1's
pooled t-test at ``max`` seeds, Holm over the rows, as the rule's family; and Table 1's default
Benjamini-Hochberg). Before that it checks the testbed's determinism: the adaptive sweep's rounds
replayed on the fixed sweep's scores (the same seeds of the same cells give the same scores)
must ask for exactly the runs the adaptive sweep made.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gppo.analysis.data.collect import paid_by_cell
from gppo.grid import load_plan
from gppo.grid.load import Plan
from gppo.grid.sharing import run_groups
from gppo.stats import inference as S
from gppo.stats.rounds import Rounds, row_of
from gppo.store.follower import costs_nothing
from gppo.store.health import refusal_naming_client
from gppo.store.records import fetch_records, find_sweep, latest_attempts
from gppo.store.run_score import run_score


@dataclass
class Sweep:
    """A launched sweep: its plan, each finished cell's score (points) and CPU-h, its runs."""

    plan: Plan
    scores: dict[str, float]
    cpu_hours: float
    runs: int


def read_sweep(path: str) -> Sweep:
    plan = load_plan(path)
    uri = plan.spec.tracking.uri or f"sqlite:///{Path(path).resolve().parent}/mlflow.db"
    ref = find_sweep(plan.sweep_id, uri, experiment=plan.spec.experiment)
    client = refusal_naming_client(ref.tracking_uri)
    records = fetch_records(client, ref.sweep_id, experiment_id=ref.experiment_id)
    k = {c.id: c.eval_k for c in plan.cells}
    scores = {}
    for cid, run in latest_attempts(records).items():
        score = run_score(run.metrics, k.get(cid, 8)) if run.status == "FINISHED" else None
        if score is not None:
            scores[cid] = score
    paid = paid_by_cell(records)
    cpu = sum(h.cpu for h in paid.values() if h is not None)
    own = sum(1 for r in latest_attempts(records).values() if not costs_nothing(r.tags))
    return Sweep(plan, scores, cpu, own)


def fixed_decisions(sweep: Sweep, reference: str) -> pd.DataFrame:
    """Table 1's test at the fixed sweep's seeds: Δ, Holm- and BH-adjusted p of each row."""
    rows: dict[str, list[float]] = {}
    for c in sweep.plan.cells:
        if c.id in sweep.scores:
            rows.setdefault(row_of(c), []).append(sweep.scores[c.id])
    ref = rows[reference]
    names = [r for r in rows if r != reference and rows[r] != ref]
    pool = [ref, *(rows[r] for r in names)]
    p = S.pooled_pvalues([rows[r] for r in names], ref, pool)
    holm, bh = S.adjust(p, "holm"), S.adjust(p, "bh")
    out = pd.DataFrame(
        {
            "row": names,
            "fixed Δ": [sum(rows[r]) / len(rows[r]) - sum(ref) / len(ref) for r in names],
            "fixed Holm": [bool(x <= S.ALPHA) for x in holm],
            "fixed BH": [bool(x <= S.ALPHA) for x in bh],
        }
    )
    return out.set_index("row")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixed", required=True, help="the spec of the fixed sweep (seeds: max)")
    ap.add_argument("--adaptive", required=True, help="the spec with seeds: {min, max}")
    args = ap.parse_args(argv)
    fixed, adaptive = read_sweep(args.fixed), read_sweep(args.adaptive)
    rounds = Rounds.of_plan(adaptive.plan)
    reference = adaptive.plan.spec.reference

    # determinism: the adaptive rounds on the fixed sweep's scores ask for the same runs
    replayed = rounds.wanted(fixed.scores)
    for group in run_groups(adaptive.plan.cells):  # as the launcher's gate: a wanted cell's
        if any(c.id in replayed for c in group):  # identical cells are served by its run
            replayed |= {c.id for c in group}
    ran = set(adaptive.scores)
    same = replayed == ran
    print(f"replay of the rounds on the fixed sweep's scores asks for the runs made: {same}")
    if not same:
        print(f"  replay only: {sorted(replayed - ran)}; run only: {sorted(ran - replayed)}")

    print("\n## Cost\n")
    cost = pd.DataFrame(
        [
            {"sweep": Path(args.fixed).name, "runs": fixed.runs, "CPU-h": fixed.cpu_hours},
            {"sweep": Path(args.adaptive).name, "runs": adaptive.runs, "CPU-h": adaptive.cpu_hours},
        ]
    )
    cost["ratio (runs)"] = cost["runs"] / fixed.runs
    cost["ratio (CPU-h)"] = cost["CPU-h"] / fixed.cpu_hours
    print(cost.to_markdown(index=False, floatfmt=".3f"))

    print("\n## Decisions, row by row\n")
    (stops,) = rounds.stops(adaptive.scores)
    table = fixed_decisions(fixed, reference)
    table["adaptive"] = [stops[r].text() for r in table.index]
    table["adaptive Δ [design interval]"] = [
        f"{stops[r].delta:+.2f} [{stops[r].interval[0]:+.2f}, {stops[r].interval[1]:+.2f}]"
        if stops[r].delta is not None and stops[r].interval
        else "-"
        for r in table.index
    ]
    sep = {r: stops[r].status == "separated" for r in table.index}
    table["agree (Holm)"] = [sep[r] == table.loc[r, "fixed Holm"] for r in table.index]
    print(table.to_markdown(floatfmt="+.2f"))
    both = sum(sep[r] and table.loc[r, "fixed Holm"] for r in table.index)
    only_a = [r for r in table.index if sep[r] and not table.loc[r, "fixed Holm"]]
    only_f = [r for r in table.index if table.loc[r, "fixed Holm"] and not sep[r]]
    print(
        f"\nseparated by both: {both}; by the adaptive sweep only: {only_a or 'none'}; "
        f"by the fixed sweep (Holm) only: {only_f or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
