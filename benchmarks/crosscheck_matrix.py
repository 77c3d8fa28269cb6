"""The independent check of issue 57 over the full product of features (96 small probe sweeps):
seeds (fixed, adaptive) x axis (none, one that moves the base, one that does not) x identical
cells x a failed seed x a budget that cuts x a kill -9 of the launcher and a relaunch. Each sweep
runs on one shared local Ray head and is checked by ``tests/crosscheck/recompute.py`` (written
apart from ``gppo.analysis``) against table1.csv, scores.csv, the report page and ``status``.
The suite runs a pairwise subset (``tests/sweep/test_crosscheck.py``).

    nice .venv/bin/python benchmarks/crosscheck_matrix.py                 # all 96 (about 1.5 h)
    nice .venv/bin/python benchmarks/crosscheck_matrix.py --pairwise      # the suite's 7
    nice .venv/bin/python benchmarks/crosscheck_matrix.py --only adaptive-moves

Prints one line per combination (``ok`` or its disagreements) and exits 1 if any disagrees.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from crosscheck.matrix import PAIRWISE, full_product, run_combo

from gppo.sweep.cluster.connect import start_local_head, stop_local_head


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairwise", action="store_true", help="only the suite's combinations")
    parser.add_argument("--only", default="", help="combinations whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep each sweep's folder")
    args = parser.parse_args()
    combos = [c for c in (PAIRWISE if args.pairwise else full_product()) if args.only in c.name()]
    root = Path(tempfile.mkdtemp(prefix="gppo-crosscheck-"))
    state = root / "ray"
    cluster = start_local_head(state, num_cpus=4, num_gpus=0)
    failed = 0
    try:
        for combo in combos:
            start = time.monotonic()
            problems = run_combo(combo, root / combo.name(), cluster.address)
            took = time.monotonic() - start
            print(f"{combo.name():40s} {'ok' if not problems else 'DISAGREES'}  {took:.0f}s")
            for p in problems:
                print(f"    {p}")
            failed += bool(problems)
            sys.stdout.flush()
    finally:
        stop_local_head(state)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{len(combos) - failed}/{len(combos)} combinations agree")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
