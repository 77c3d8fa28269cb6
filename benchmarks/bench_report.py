"""Report speed on a big sweep: 10,000 cell runs in a SQLite MLflow store -> Table 1.

Usage: ``python benchmarks/bench_report.py [--runs 10000] [--dir DIR]``

Population (not timed) writes the runs straight into MLflow's own tables (its SQLAlchemy models)
in a few bulk inserts: creating 10,000 runs through the client takes ~50 ms each on SQLite. The
timed steps use only the public client API, exactly as ``gppo-sweep report`` does:

- ``search_runs (raw)``: MLflow's paged ``search_runs`` alone (the reference of the ratio column);
- ``collect``: the report's collect step (SQL fast path of gppo/store/records.py + the tidy frame:
  latest attempt per cell, statuses, base row);
- ``collect (search_runs)``: the same through the public ``search_runs`` path (remote stores);
- ``build``: Table 1 model (means, 95% CIs, ranks, footnotes);
- ``render <fmt>``: each output format.

Target: collect + build + render(md) <= 10 s.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from pathlib import Path

from mlflow import MlflowClient
from sqlalchemy import insert

from gppo import metrics as M
from gppo.analysis.data.collect import collect
from gppo.analysis.tables.render import FORMATS, render
from gppo.analysis.tables.table1 import build_table1
from gppo.store.records import find_sweep, search_all, sweep_filter

DIVERGENCES = ("tv", "hellinger", "chi2", "kl", "js")
ESTIMATORS = ("mc", "binary", "atomic")
BASELINES = ("gspo", "gmpo", "sapo", "cispo", "clip_cov")
DOMAINS = {"math": ("AIME24", "AIME25", "BRUMO25", "SMT25"), "code": ("CF", "CC", "TACO", "APPS")}
SWEEP_ID = "bench-0000abcd"


def populate(uri: str, n_runs: int, seed: int = 0) -> str:
    """Create the sweep layout with ``n_runs`` cell runs; returns the parent run id."""
    from mlflow.store.tracking.dbmodels import models as db

    rng = random.Random(seed)
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("bench")
    parent = client.create_run(
        exp, tags={M.TAG_ROLE: M.ROLE_SWEEP, M.TAG_SWEEP_ID: SWEEP_ID, M.TAG_SWEEP_NAME: "bench"}
    ).info.run_id
    cells = [("gppo", d, e) for d in DIVERGENCES for e in ESTIMATORS]
    cells += [(b, None, None) for b in BASELINES]
    per_seed = len(cells) * len(DOMAINS)
    runs, tags, metrics, params = [], [], [], []
    t0 = int(time.time() * 1000)
    for i in range(n_runs):
        seed_no, j = divmod(i, per_seed)
        domain = list(DOMAINS)[j % len(DOMAINS)]
        method, div, est = cells[j // len(DOMAINS)]
        rid = uuid.uuid4().hex
        roll = rng.random()
        status, finished = ("FINISHED", True)
        if roll < 0.02:
            status, finished = ("FAILED", False)
        elif roll < 0.03:
            status, finished = ("RUNNING", False)
        start = t0 + i
        runs.append(
            {
                "run_uuid": rid,
                "name": rid[:8],
                "source_type": "LOCAL",
                "source_name": "",
                "entry_point_name": "",
                "user_id": "bench",
                "status": status,
                "start_time": start,
                "end_time": None if status == "RUNNING" else start + 60_000,
                "source_version": "",
                "lifecycle_stage": "active",
                "artifact_uri": "",
                "experiment_id": int(exp),
            }
        )
        cid = (f"{div}-{est}" if method == "gppo" else method) + f"-s{seed_no}"
        run_tags = {
            M.PARENT_RUN_TAG: parent,
            M.TAG_ROLE: M.ROLE_CELL,
            M.TAG_SWEEP_ID: SWEEP_ID,
            M.TAG_CELL_ID: f"{domain}-{cid}",
            M.TAG_METHOD: method,
            M.TAG_DIVERGENCE: str(div),
            M.TAG_ESTIMATOR: str(est),
            M.TAG_SEED: str(seed_no),
            M.TAG_ATTEMPT: "1",
            M.TAG_DOMAIN: domain,
            M.TAG_BACKEND: "verl",
            M.TAG_CELL_HASH: rid[:12],
        }
        if finished:
            run_tags[M.TAG_FINISHED] = "true"
        tags += [{"key": k, "value": v, "run_uuid": rid} for k, v in run_tags.items()]
        values = {M.TRAIN_SCORE: rng.random(), M.ENTROPY: rng.random(), M.WALL_TIME: 60.0}
        for b in DOMAINS[domain]:
            values[M.eval_base_metric(b, 8)] = rng.uniform(0.0, 0.3)
            if finished:
                values[M.eval_metric(b, 8)] = rng.uniform(0.2, 0.7)
        for k, v in values.items():
            step = 0 if k.startswith("eval_base/") else 400
            row = {"key": k, "value": v, "timestamp": start, "step": step, "is_nan": False}
            metrics.append({**row, "run_uuid": rid})
        params += [
            {"key": p, "value": str(v), "run_uuid": rid}
            for p, v in (("method", method), ("seed", seed_no), ("eval_k", 8), ("lr", 1e-6))
        ]
    store = client._tracking_client.store  # population only: bulk inserts into MLflow's tables
    with store.ManagedSessionMaker() as session:
        session.execute(insert(db.SqlRun), runs)
        session.execute(insert(db.SqlTag), tags)
        session.execute(insert(db.SqlMetric), metrics)
        session.execute(insert(db.SqlLatestMetric), metrics)
        session.execute(insert(db.SqlParam), params)
    return parent


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        _, t_pop = timed(lambda: populate(uri, args.runs))
        client = MlflowClient(tracking_uri=uri)
        raw, t_raw = timed(lambda: search_all(client, sweep_filter(SWEEP_ID)))
        ref = find_sweep(SWEEP_ID, uri)
        got, t_collect = timed(lambda: collect(ref, client=client))
        slow, t_slow = timed(lambda: collect(ref, client=client, fast=False))
        assert slow.tidy.equals(got.tidy), "the two collect paths disagree"
        table, t_build = timed(lambda: build_table1(got.tidy, k=got.k))
        renders = {fmt: timed(lambda f=fmt: render(table, f))[1] for fmt in FORMATS}
    total = t_collect + t_build + renders["md"]
    print(
        f"{args.runs} cell runs ({len(raw)} found), {len(got.tidy)} tidy rows;"
        f" population {t_pop:.1f} s (not timed)"
    )
    print(f"{'step':<24}{'seconds':>10}{'x search_runs':>15}")
    rows = [("search_runs (raw)", t_raw), ("collect", t_collect)]
    rows += [("collect (search_runs)", t_slow), ("build table", t_build)]
    rows += [(f"render {fmt}", t) for fmt, t in renders.items()]
    rows += [("collect+build+md", total)]
    for name, t in rows:
        print(f"{name:<24}{t:>10.3f}{t / t_raw:>15.2f}")
    print(f"target <= 10 s: {'OK' if total <= 10 else 'MISSED'} ({total:.2f} s)")


if __name__ == "__main__":
    main()
