"""What the GPU check scripts share (scripts/gpu-smoke.sh, gpu-testbed.sh, gpu-trl-example.sh,
gpu-trl-testbed.sh; never run by CI): tiny math data, a preset's spec with only the hardware
changed, one cell's job run as the dispatcher runs it (minus Ray Jobs), and a launch's Table 1.

    python scripts/gpu_common.py tiny-math WORK     # WORK/train.parquet and WORK/aime24.parquet

The scripts' Python parts import it (``sys.path.insert(0, "scripts")``), from the repository root.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

#: Four training and two evaluation problems: enough for two steps of a real chat model.
TINY_TRAIN = [("What is 2 + 3?", "5"), ("What is 7 - 4?", "3"), ("What is 3 * 3?", "9"),
              ("What is 8 / 2?", "4")]  # fmt: skip
TINY_VAL = [("What is 1 + 1?", "2"), ("What is 5 + 5?", "10")]


def tiny_math(work: Path) -> tuple[Path, Path]:
    """``work/train.parquet`` (as ``dapo_math_17k``) and ``work/aime24.parquet`` (``aime24``,
    the test split), written by ``gppo-sweep data prepare``'s converter."""
    from gppo.backends.rldata import prepare

    out = []
    for rows, name, source, split in (
        (TINY_TRAIN, "train", "dapo_math_17k", "train"),
        (TINY_VAL, "aime24", "aime24", "test"),
    ):
        src = work / f"{name}.jsonl"
        src.write_text("".join(json.dumps({"problem": p, "answer": a}) + "\n" for p, a in rows))
        out.append(prepare(src, work / f"{name}.parquet", source, split=split).output)
    return out[0], out[1]


def write_spec(preset: str, work: Path, name: str, edit: Any) -> Path:
    """``configs/<preset>`` with ``edit(spec)`` applied (the hardware settings), as
    ``work/<name>.yaml``."""
    spec = yaml.safe_load(Path("configs", preset).read_text())
    spec["name"] = name
    edit(spec)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def launch_on_one_gpu(spec: dict[str, Any], work: Path) -> None:
    """A spec's sections for ``gppo-sweep launch`` of one cell at a time on one GPU: a local
    head that shows it, and an MLflow store in ``work``."""
    spec["ray"] = {
        "max_concurrent": 1,
        "resources": {"num_cpus": 1, "num_gpus": 1},
        "local_head": {"num_cpus": 4, "num_gpus": 1},
    }
    spec["tracking"] = {"uri": f"sqlite:///{work}/mlflow.db"}


def run_cell_job(spec_path: Path, cell_id: str, label: str) -> tuple[Any, str, Any, Any]:
    """Run ``cell_id``'s verl job as the dispatcher would, minus Ray Jobs (verl starts a local
    Ray itself): the assets built, the overrides checked against verl's config, an MLflow run in
    the spec's folder, the job's command with the job's environment. With ``DRY_RUN=1`` the job
    only checks its overrides (no GPU needed) and this exits. Returns ``(client, run_id, cell,
    settings)``; exits with the job's failure."""
    from mlflow.tracking import MlflowClient

    from gppo.backends.base import get_backend
    from gppo.grid.expand import expand
    from gppo.grid.load import load_spec

    work = spec_path.parent
    cell = {c.id: c for c in expand(load_spec(spec_path))}[cell_id]
    backend = get_backend("verl")
    settings = backend.validate_settings(cell.settings)
    backend.prepare(settings)
    job = backend.job(cell)
    uri = f"sqlite:///{work}/mlflow.db"
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment(label)).info.run_id
    env = {**os.environ, **job.env, "MLFLOW_TRACKING_URI": uri, "MLFLOW_RUN_ID": run_id}
    argv = list(job.argv)
    if os.environ.get("DRY_RUN") == "1":
        argv.insert(argv.index("--"), "--check-only")
        sys.exit(subprocess.run(argv, env=env, cwd=work).returncode)
    print(f"{label}: running", job.entrypoint, flush=True)
    rc = subprocess.run(argv, env=env, cwd=work).returncode
    if rc != 0:
        sys.exit(f"{label}: the job failed with exit code {rc}")
    return client, run_id, cell, settings


def launch_table1(spec_path: Path, label: str) -> dict[str, dict[str, str]]:
    """``gppo-sweep launch`` of the spec in its folder; the rows of the launch's ``table1.csv``,
    by cell. Exits with the launch's failure."""
    work = spec_path.parent
    rc = subprocess.run(["gppo-sweep", "launch", spec_path.name], cwd=work).returncode
    if rc != 0:
        sys.exit(f"{label}: gppo-sweep launch failed with exit code {rc}")
    (table,) = glob.glob(f"{work}/reports/*/table1.csv")
    with open(table) as f:
        return {r["cell"]: r for r in csv.DictReader(f)}


if __name__ == "__main__":
    if sys.argv[1:2] != ["tiny-math"] or len(sys.argv) != 3:
        sys.exit("usage: python scripts/gpu_common.py tiny-math WORK")
    for path in tiny_math(Path(sys.argv[2])):
        print(path)
