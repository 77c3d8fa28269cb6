"""``gppo-sweep launch > file``: timestamped event lines, no live-table fragments, a summary line
and a final table that fits 100 columns (a real CLI process on real Ray and MLflow)."""

from __future__ import annotations

import re
import subprocess

import pytest

from gppo.grid import load_plan
from gppo.sweep.monitor.launch_log import LaunchLog, eta_s, fmt_duration
from gppo.sweep.result import LaunchResult
from gppo.sweep.running.attempts import DONE, FAILED, RUNNING, CellState

from .conftest import env_without_ray, launcher_cmd, write_spec

pytestmark = pytest.mark.slow  # every test here starts Ray or a launcher

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ  "


def test_launch_to_a_file_logs_one_line_per_event(tmp_path, ray_cluster):
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="logged",
        overrides={"kl-mc": {"probe": {"fail_times": 1}}},
        retries={"max": 2, "backoff_s": 0.2},
    )
    log = tmp_path / "log.txt"
    with open(log, "w") as fh:
        proc = subprocess.run(
            [*launcher_cmd(), "launch", str(spec)],
            stdout=fh, stderr=subprocess.PIPE, text=True, env=env_without_ray(), timeout=300,
            cwd=tmp_path,
        )  # fmt: skip
    text = log.read_text()
    assert proc.returncode == 0, proc.stderr + text
    lines = text.splitlines()
    assert "\x1b" not in text  # no terminal control sequences
    assert "running for" not in text and "train score" not in text  # no live-table fragments
    for noise in ("Creating initial MLflow database tables", "View run", "View experiment"):
        assert noise not in text and noise not in proc.stderr  # MLflow's output is not the launch's
    events = [ln for ln in lines if re.match(STAMP, ln)]
    kinds = [ln.split()[2] for ln in events]
    assert kinds[0] == "sweep" and events[-1].split()[2] == "sweep"  # header and summary
    for cell in ("tv-mc-s0", "kl-mc-s0"):
        assert any(re.match(STAMP + rf"submitted +{cell}  attempt 1", ln) for ln in events)
        assert any(
            re.match(STAMP + rf"finished +{cell}  avg@8 50\.0% in \d+s", ln) for ln in events
        )
    assert any(re.match(STAMP + r"retrying +kl-mc-s0  retry 1/2: ", ln) for ln in events)
    assert any(re.match(STAMP + r"submitted +kl-mc-s0  attempt 2", ln) for ln in events)
    assert re.search(r"progress +1/2 done, .* about \d+s left", text)
    assert re.match(STAMP + r"sweep logged-\w+: 2/2 done, 0 failed in \d+", events[-1])
    # Table 1 came after the events, within 100 columns, row labels on one line each
    table = lines[lines.index(events[-1]) + 1 :]
    assert any("TV" in ln and "MC (GRPO)" in ln for ln in table), text
    # (the UI hint after it is a command to copy: one line, however long the spec's path)
    hint = "compare the runs in the MLflow UI: gppo-sweep ui "
    assert sum(ln.startswith(hint) for ln in table) == 1, text
    wide = [ln for ln in table if len(ln) > 100 and not ln.startswith(hint)]
    assert not wide, wide


def test_log_lines_for_events_and_time_left(tmp_path):
    """The log alone, fed the launcher's events and updates as its loop would: one stamped line
    per event (outages and recoveries included), nothing read from a store."""
    from gppo.sweep.running.attempts import Event
    from gppo.sweep.running.dispatcher import Attempt

    plan = load_plan(write_spec(tmp_path, None, name="unit", grid={"divergences": ["tv", "kl"]}))
    clock = [1000.0]
    lines: list[str] = []
    log = LaunchLog(lines.append, slots=1, now=lambda: clock[0])

    res = LaunchResult("unit-1")
    res.cells = {c.id: CellState(c) for c in plan.cells}
    tv, kl = res.cells["tv-mc-s0"], res.cells["kl-mc-s0"]
    log(res)
    assert lines[-1].endswith("sweep unit-1: 2 cells, 0 already finished, 1 at a time")
    tv.state, tv.current = RUNNING, Attempt(tv.cell, 1, "r0", "sid0", submitted_at=1000.0)
    log.event(Event("submitted", "tv-mc-s0", 1, job="sid0"))
    assert lines[-1].endswith("submitted   tv-mc-s0  attempt 1  job sid0")
    log.event(Event("step", "tv-mc-s0", 1, step=3, score=0.5))  # the live table's, not the log's
    assert len(lines) == 2
    clock[0] = 1100.0
    tv.state, tv.current = DONE, None
    log.event(Event("finished", "tv-mc-s0", 1, score=0.4375, took_s=100.0))
    assert lines[-1].endswith("finished    tv-mc-s0  avg@8 43.8% in 1m40s")
    kl.state, kl.attempt = RUNNING, 1
    kl.current = Attempt(kl.cell, 1, "r1", "sid1", submitted_at=1100.0)
    log(res)
    assert lines[-1].endswith(
        "progress    1/2 done, 1 running, 0 pending, 0 failed; about 1m40s left"
    )
    log.event(Event("outage", service="tracking", where="http://t:5000", reason="timed out",
                    limit_s=600))  # fmt: skip
    assert (
        "outage      the tracking server at http://t:5000 does not answer (timed out)"
        in (lines[-1])
    )
    log.event(Event("recovered", service="tracking", where="http://t:5000", took_s=61.2))
    assert lines[-1].endswith(
        "recovered   the tracking server at http://t:5000 answers again after 61 s"
    )
    why = "job FAILED: ValueError: boom"
    log.event(Event("retrying", "kl-mc-s0", 1, note="retry 1/1", reason=why))
    assert lines[-1].endswith("retrying    kl-mc-s0  retry 1/1: job FAILED: ValueError: boom")
    kl.state, kl.note, kl.current = FAILED, "failed after 2 attempt(s)", None
    log.event(Event("failed", "kl-mc-s0", 2, note=kl.note, reason=why))
    assert lines[-1].endswith(
        "failed      kl-mc-s0  failed after 2 attempt(s): job FAILED: ValueError: boom"
    )
    clock[0] = 1130.0
    assert all(re.match(STAMP, ln) for ln in lines)
    assert "1/2 done, 1 failed in 2m10s" in log.summary(res)


def test_time_left_estimate():
    assert eta_s([], 3, [10.0], 2) is None  # nothing finished yet: no estimate
    # 2 pending of 60 s each + a running cell 20 s into its 60 s, over 2 slots
    assert eta_s([50.0, 70.0], 2, [20.0], 2) == (2 * 60 + 40) / 2
    assert fmt_duration(42) == "42s" and fmt_duration(185) == "3m05s"
    assert fmt_duration(3720) == "1h02m"


def test_final_table_never_wraps_a_row_label_at_80_or_100_columns():
    import io
    from pathlib import Path

    from rich.console import Console

    from gppo.analysis.data.tidy import read_scores_csv
    from gppo.analysis.tables.render import print_table1
    from gppo.analysis.tables.table1 import build_table1

    paper = Path(__file__).parents[1] / "analysis" / "data" / "paper_table1.csv"
    table = build_table1(read_scores_csv(paper), reference="tv/mc")
    for width in (80, 100):
        buf = io.StringIO()
        print_table1(Console(file=buf, width=width), table)
        lines = buf.getvalue().splitlines()
        assert max(len(ln) for ln in lines) <= width
        assert any("Binary (DPPO)" in ln for ln in lines)  # on one line, never "Binary" + "(DPPO)"
        assert not any(ln.strip(" │┃").startswith("(DPPO)") for ln in lines)


def test_multi_seed_final_table_fits_100_columns_without_cutting_a_number():
    """Several seeds: the terminal table gives Avg. and Δ with their CIs and P(>), leaves the
    per-benchmark columns to the report, and cuts no value ("…") at 100 columns."""
    import io
    from pathlib import Path

    import numpy as np
    import pandas as pd
    from rich.console import Console

    from gppo.analysis.data.tidy import normalise, read_scores_csv
    from gppo.analysis.tables.render import print_table1
    from gppo.analysis.tables.table1 import build_table1

    paper = read_scores_csv(Path(__file__).parents[1] / "analysis" / "data" / "paper_table1.csv")
    rng = np.random.default_rng(0)
    seeded = [
        paper.assign(seed=s, score=paper.score + rng.normal(0, 0.01, len(paper))) for s in (0, 1, 2)
    ]
    table = build_table1(normalise(pd.concat(seeded, ignore_index=True)), reference="tv/mc")
    assert table.multi_seed
    buf = io.StringIO()
    print_table1(Console(file=buf, width=100), table)
    lines = buf.getvalue().splitlines()
    assert max(len(ln) for ln in lines) <= 100
    body = [ln for ln in lines if "Binary (DPPO)" in ln]
    assert body and "…" not in body[0], body
    assert body[0].count("[") == 2  # Avg. and Δ carry their intervals
    assert not any("AIME24" in ln for ln in lines)  # a benchmark column: in the report only
    assert any("leaves out the per-benchmark columns" in ln for ln in lines)


def test_the_last_line_counts_unneeded_seeds_apart_from_a_failed_rows(tmp_path):
    """Issue 57 item 2: seeds of a row the rule decided are 'not needed'; seeds of a row that
    stopped on a failed seed are said apart; a launch without adaptive seeds says neither."""
    plan = load_plan(write_spec(tmp_path, None, name="unit", grid={"divergences": ["tv", "kl"]}))
    log = LaunchLog([].append, slots=1, now=lambda: 1000.0)
    res = LaunchResult("unit-1")
    res.cells = {c.id: CellState(c) for c in plan.cells}
    assert "not needed" not in log.summary(res) and "not run" not in log.summary(res)
    res.held = set(res.cells)
    res.idle = {"tv-mc-s0": "unneeded", "kl-mc-s0": "row failed"}
    assert log.summary(res).endswith(
        "0/2 done, 0 failed in 0s (1 seed not needed by the adaptive rounds; "
        "1 not run: their row stopped on a failed seed)"
    )
    assert res.unneeded == {"tv-mc-s0"} and res.ok  # held cells: the sweep is complete
