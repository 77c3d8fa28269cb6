"""What verifying an attempt's end costs: the scan of this machine's processes that every run's
end now makes (:func:`gppo.processes.end_attempt`), against ``psutil.process_iter()`` alone in
the same run, with 0, 100 and 300 extra idle processes on the machine (a verl cell on a GPU node
runs ~15-40; a busy login node a few hundred).

    .venv/bin/python benchmarks/bench_attempt_end.py [--extra 0 100 300] [--repeats 20]

Columns: processes on the machine; the median time of one ``end_attempt`` that finds nothing
(the usual case: the job ended its own processes), of the bare iteration, and their ratio; and
the time to end one attempt that left 4 processes ignoring SIGTERM with the grace set to 0
(SIGTERM, SIGKILL, confirmed gone), which is what a stalled attempt adds to its retry's start
beyond ``retries.kill_grace_s``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import psutil

from gppo.processes import ENV_ATTEMPT, end_attempt

IDLE = "import time; time.sleep(3600)"
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _spawn(code: str, n: int, env: dict[str, str] | None = None) -> list[subprocess.Popen]:
    return [
        subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **(env or {})})
        for _ in range(n)
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--extra", type=int, nargs="+", default=[0, 100, 300])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    print(
        "| processes | end_attempt, nothing left (ms) | process_iter alone (ms) | ratio |"
        " end 4 left, grace 0 (ms) |"
    )
    print("| --- | --- | --- | --- | --- |")
    spawned: list[subprocess.Popen] = []
    try:
        for extra in args.extra:
            spawned += _spawn(IDLE, extra - (len(spawned)))
            time.sleep(1.0)
            count = len(psutil.pids())
            scan = _median_s(lambda: end_attempt("bench-nothing", 0.0), args.repeats)
            bare = _median_s(lambda: list(psutil.process_iter()), args.repeats)
            deaf = _spawn(DEAF, 4, {ENV_ATTEMPT: f"bench-{extra}"})
            time.sleep(1.0)
            t0 = time.perf_counter()
            ended = end_attempt(f"bench-{extra}", 0.0)
            took = time.perf_counter() - t0
            assert len(ended.found) == 4 and not ended.survivors, ended
            for p in deaf:
                p.wait()
            print(
                f"| {count} | {scan * 1e3:.1f} | {bare * 1e3:.2f} | {scan / bare:.0f}x |"
                f" {took * 1e3:.0f} |"
            )
    finally:
        for p in spawned:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
