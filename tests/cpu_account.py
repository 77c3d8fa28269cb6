"""Where the suite's CPU goes: each test's CPU seconds, with everything it started.

On a 2-core machine both workers keep both cores busy, so a test's wall time says little about
what it costs the run: a test that waits (a server away for 60 s) frees the cores for the other
worker, one that trains takes them. This plugin puts each pytest process (xdist's workers) in a
cgroup of its own (cgroup v1 ``cpuacct``: root, Linux) and charges every test with the CPU time
its process and all its descendants used while it ran (Ray heads and their workers, cells,
servers: a process started by a test stays in its worker's cgroup, daemonized or not)::

    GPPO_TEST_CPU=cpu.jsonl python -m pytest -q -p cpu_account   # one JSON line per test
    python tests/cpu_account.py cpu.jsonl                        # by file, then by test

A session fixture's processes (a worker's Ray head) are charged to the tests that run while they
work. The cgroups are removed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

#: the file each test's line is appended to; unset: the plugin does nothing
CPU_ENV = "GPPO_TEST_CPU"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_GROUP = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(CPU_ENV):
        return
    group = CPUACCT / f"gppo-test-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        raise pytest.UsageError(
            f"{CPU_ENV}: cannot make a cpuacct cgroup at {group} ({exc.strerror}): "
            "it needs cgroup v1's cpuacct, as root"
        ) from exc
    config.stash[_GROUP] = group


def _used_s(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    group = item.config.stash.get(_GROUP, None)
    if group is None:
        return (yield)
    cpu, wall = _used_s(group), time.time()
    try:
        return (yield)
    finally:
        line = {
            "nodeid": item.nodeid,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "cpu_s": round(_used_s(group) - cpu, 3),
            "wall_s": round(time.time() - wall, 3),
        }
        with open(os.environ[CPU_ENV], "a") as out:
            out.write(json.dumps(line) + "\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Move this process back to the root cgroup and remove its own (empty once its processes
    are gone; one a process outlived is left to the next boot)."""
    group = config.stash.get(_GROUP, None)
    if group is None:
        return
    (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
    with contextlib.suppress(OSError):
        group.rmdir()


def report(path: Path, top: int = 40) -> str:
    """CPU seconds by test file, then the ``top`` tests, from the plugin's lines."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for t in lines:
        f = by_file[t["nodeid"].split("::")[0]]
        f[0], f[1], f[2] = f[0] + t["cpu_s"], f[1] + t["wall_s"], f[2] + 1
    cpu = sum(t["cpu_s"] for t in lines)
    out = [f"{len(lines)} tests: {cpu:.0f} s of CPU, {sum(t['wall_s'] for t in lines):.0f} s of "
           "worker time", "", "   cpu s   wall s  tests  file"]  # fmt: skip
    for name, (c, w, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        out.append(f"{c:8.1f} {w:8.1f} {n:6d}  {name}")
    out += ["", "   cpu s   wall s  test"]
    for t in sorted(lines, key=lambda t: -t["cpu_s"])[:top]:
        out.append(f"{t['cpu_s']:8.1f} {t['wall_s']:8.1f}  {t['nodeid']}")
    return "\n".join(out)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40))
