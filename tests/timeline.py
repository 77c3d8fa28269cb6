"""The suite's timeline, from ``GPPO_TEST_TIMELINE``'s file (tests/conftest.py): per worker, its
busy time, its first start and last stop, and its longest tests; which worker ended last is the
suite's long pole, and the tests that would shorten it are its own.

    GPPO_TEST_TIMELINE=/tmp/timeline.jsonl python -m pytest -q
    python tests/timeline.py /tmp/timeline.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def summary(path: Path, top: int = 15) -> str:
    """Per worker: tests, busy seconds (setup + call + teardown), span, and its ``top`` tests."""
    phases = pd.read_json(path, lines=True)
    phases["seconds"] = phases["stop"] - phases["start"]
    t0 = phases["start"].min()
    lines = []
    for worker, part in phases.groupby("worker"):
        tests = part.groupby("nodeid")["seconds"].sum().sort_values(ascending=False)
        lines.append(
            f"{worker}: {len(tests)} tests, busy {tests.sum():.0f} s, "
            f"from {part['start'].min() - t0:.0f} s to {part['stop'].max() - t0:.0f} s"
        )
        lines += [f"  {s:7.1f} s  {nodeid}" for nodeid, s in tests.head(top).items()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
