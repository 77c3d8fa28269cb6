"""scripts/exploration_report.py (issue 57, item 8): every table's header comes from the same
order as its cells, and the study pages' gain tables are what the script prints from their
per-run data (rare-learnable's had Atomic's numbers under Binary and Binary's under Atomic).
Issue 59: the per-run frame has the low side's clip fractions and abs_log_ratio, collected from
a run's history as the high side's are, and the script prints their tables (or that an older
CSV has none)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pandas as pd
import pytest
from mlflow import MlflowClient
from scipy import stats

from gppo import metrics as M
from gppo.analysis.tables import exploration_contrasts as C
from gppo.analysis.vocabulary import EST_NAMES
from gppo.objectives.buckets import MU_BUCKETS
from gppo.store.records import RunRecord

ROOT = Path(__file__).resolve().parents[2]


def _load_script():
    """The script as a module, loaded at collection (its matplotlib import may build the font
    cache, a process, which a fast test may not start)."""
    spec = importlib.util.spec_from_file_location(
        "exploration_report", ROOT / "scripts" / "exploration_report.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _load_script()


def test_each_column_is_named_by_its_numbers_estimator():
    gains = pd.DataFrame(
        [
            {"point": 1.0, "divergence": "tv", "estimator": e, "mean": m, "lo": m, "hi": m}
            for e, m in (("atomic", 1.0), ("mc", 2.0), ("binary", 3.0))
        ]
    )
    table = SCRIPT.gain_markdown(gains, {1.0: 10.0}).splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    row = [c.strip() for c in table[2].strip("|").split("|")]
    by_name = dict(zip(header[3:], row[3:], strict=True))
    want = {"atomic": "+1.0", "mc": "+2.0", "binary": "+3.0"}
    assert {n: v.split()[0] for n, v in by_name.items()} == {
        EST_NAMES[e]: v for e, v in want.items()
    }


def _page_gains(page: str) -> dict[tuple[str, str], dict[str, str]]:
    """The page's gain table: (level, divergence) -> {estimator name: cell}."""
    text = (ROOT / "docs" / "studies" / page).read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    start = next(i for i, ln in enumerate(lines) if "| base avg@8 | divergence |" in ln)
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    out = {}
    for ln in lines[start + 2 :]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(header) or not re.match(r"^[0-9.]+$", cells[0]):
            break
        out[(cells[0], cells[2].lower())] = dict(zip(header[3:], cells[3:], strict=True))
    return out


@pytest.mark.parametrize(
    ("page", "spec", "axis", "data"),
    [
        ("rare-learnable.md", "rare-learnable.yaml", "local.base_temperature", "rare-learnable"),
        ("exploration.md", "exploration.yaml", "local.warmstart_target", "exploration"),
    ],
)
def test_the_study_pages_gain_tables_are_the_scripts(page, spec, axis, data, tmp_path):
    argv = [str(ROOT / "configs" / spec), "--axis", axis, "--out", str(tmp_path)]
    argv += ["--runs", str(ROOT / "docs" / "data" / f"{data}-runs.csv")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert SCRIPT.main(argv) == 0
    printed = [ln for ln in out.getvalue().splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in printed[0].strip("|").split("|")]
    got = {}
    for ln in printed[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(header):
            break
        got[(cells[0], cells[2].lower())] = dict(zip(header[3:], cells[3:], strict=True))
    shown = _page_gains(page)
    assert shown and shown == {key: got[key] for key in shown}


def test_the_rare_learnable_pages_low_side_and_step_tables_are_the_scripts(tmp_path):
    """Issue 59 items 1-2: the page's two tables are what the script prints from the data."""
    argv = [str(ROOT / "configs" / "rare-learnable.yaml"), "--axis", "local.base_temperature"]
    argv += ["--out", str(tmp_path), "--runs", str(ROOT / "docs/data/rare-learnable-runs.csv")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert SCRIPT.main(argv) == 0
    text = out.getvalue()
    tables = text[text.index("## Low-side clip fraction") :]
    rows = [ln for ln in tables.splitlines() if ln.startswith("| ")]
    assert len(rows) == 2 * (2 + 12)  # two tables: header, rule, 4 levels x 3 estimators
    page = (ROOT / "docs" / "studies" / "rare-learnable.md").read_text()
    assert [r for r in rows if r not in page] == []


# --- issue 59: the low side's clip fractions and abs_log_ratio -----------------------------------

BUCKETS = [b[0] for b in MU_BUCKETS]


class _History:
    """An MLflow-like client of metric histories only: ``get_metric_history`` of
    ``{run_id: {name: [(step, value), ...]}}`` (written in step order, one timestamp each)."""

    def __init__(self, runs: dict[str, dict[str, list[tuple[int, float]]]]) -> None:
        self.runs = runs

    def get_metric_history(self, run_id: str, name: str) -> list[SimpleNamespace]:
        rows = self.runs[run_id].get(name, [])
        return [SimpleNamespace(step=s, value=v, timestamp=i) for i, (s, v) in enumerate(rows)]


def _record(run_id: str, est: str, seed: int) -> RunRecord:
    tags = {M.TAG_FINISHED: "true", M.TAG_ESTIMATOR: est, M.TAG_DIVERGENCE: "tv",
            M.TAG_SEED: str(seed), M.TAG_CELL_ID: run_id, M.TAG_ATTEMPT: "1",
            M.TAG_AXES: json.dumps({"local.base_temperature": 2.2})}  # fmt: skip
    metrics = {M.eval_metric("b1", 8): 0.5, M.eval_base_metric("b1", 8): 0.25}
    return RunRecord(run_id, "FINISHED", 0, 1, tags=tags, metrics=metrics)


def test_the_runs_frame_collects_the_low_side_and_abs_log_ratio_as_the_high_side(monkeypatch):
    """Per run: clip_low/<bucket> the mean over the logged steps of train/clip_frac_low/<bucket>
    (as clip_high/<bucket> of the high side's), abs_log_ratio the mean of train/abs_log_ratio
    over every step, abs_log_ratio_early over steps 1..10; a run that logged neither has NaN."""
    moves = [(s, 0.01 * s) for s in range(1, 13)]  # steps 1..12
    low = {
        M.clip_frac_bucket(b, "low"): [(1, 0.1 * i), (2, 0.3 * i)] for i, b in enumerate(BUCKETS)
    }
    high = {M.clip_frac_bucket(b, "high"): [(1, 0.2), (2, 0.4), (3, 0.6)] for b in BUCKETS}
    probe = {M.PROBE_P_ANSWER: [(0, 0.1), (10, 0.2)]}
    hist = {"r1": {**low, **high, **probe, M.ABS_LOG_RATIO: moves}, "r2": {}}  # r2: an old run
    records = [_record("r1", "atomic", 0), _record("r2", "mc", 0)]
    monkeypatch.setattr(C, "fetch_records", lambda *a, **k: records)
    client = cast(MlflowClient, _History(hist))  # runs_frame reads only metric histories
    frame = C.runs_frame(client, "sweep", "local.base_temperature")
    by = frame.set_index("estimator")
    new = [*C.clip_columns("low"), "abs_log_ratio", "abs_log_ratio_early"]
    assert list(frame.columns[-len(new) :]) == new  # after the old CSV's columns
    atomic = by.loc["atomic"]
    for i, b in enumerate(BUCKETS):
        assert atomic[f"clip_low/{b}"] == pytest.approx(0.2 * i)
        assert atomic[f"clip_high/{b}"] == pytest.approx(0.4)
    assert atomic["abs_log_ratio"] == pytest.approx(0.065)  # mean of 0.01..0.12
    assert atomic["abs_log_ratio_early"] == pytest.approx(0.055)  # mean of 0.01..0.10
    assert atomic["point"] == 2.2 and atomic["rise"] == pytest.approx(2.0)
    assert by.loc["mc", new].isna().all()


def _hand_runs(new: bool = True) -> pd.DataFrame:
    """One level (2.2), MC and Atomic, a run per divergence each; every clip fraction 0 except
    the low side's μ 0.1-0.5 (MC 1 % and 3 %, Atomic 5 % and 7 %); abs_log_ratio MC 0.02 and
    0.04, Atomic 0.01 and 0.02 (first steps 0.05, 0.07 and 0.03, 0.03). ``new``: with the
    issue 59 columns (else an older CSV's)."""
    rows = []
    for est, lows, moves, early in (
        ("mc", (0.01, 0.03), (0.02, 0.04), (0.05, 0.07)),
        ("atomic", (0.05, 0.07), (0.01, 0.02), (0.03, 0.03)),
    ):
        for div, low, move, first in zip(("tv", "kl"), lows, moves, early, strict=True):
            row = {"point": 2.2, "divergence": div, "estimator": est, "seed": 0, "base": 10.0,
                   "final": 12.0, "gain": 2.0, **{f"clip_high/{b}": 0.0 for b in BUCKETS},
                   "p_answer_0": 0.03, "p_answer_10": 0.045, "rise": 1.5}  # fmt: skip
            if new:
                row |= {f"clip_low/{b}": 0.0 for b in BUCKETS} | {"clip_low/mu_0.1_0.5": low}
                row |= {"abs_log_ratio": move, "abs_log_ratio_early": first}
            rows.append(row)
    return pd.DataFrame(rows)


def _ci_text(a: float, b: float, scale: float, digits: int) -> str:
    """Two values' mean and 95 % t interval (1 df), as the tables print them."""
    mean, half = (a + b) / 2, stats.t.ppf(0.975, 1) * abs(a - b) / 2
    return " ".join(
        [f"{scale * mean:.{digits}f}", f"[{scale * (mean - half):.{digits}f},",
         f"{scale * (mean + half):.{digits}f}]"]
    )  # fmt: skip


def _sections(runs: pd.DataFrame, tmp_path: Path) -> dict[str, list[str]]:
    """The script's output from ``runs`` as a CSV (``--runs``): section title -> its lines."""
    runs.to_csv(tmp_path / "runs.csv", index=False)
    argv = [str(ROOT / "configs" / "rare-learnable.yaml"), "--axis", "local.base_temperature"]
    argv += ["--out", str(tmp_path), "--runs", str(tmp_path / "runs.csv")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert SCRIPT.main(argv) == 0
    sections: dict[str, list[str]] = {}
    for part in out.getvalue().split("## ")[1:]:
        title, *body = part.splitlines()
        sections[title] = [ln for ln in body if ln.strip() and not ln.startswith("wrote ")]
    return sections


LOW = "Low-side clip fraction by μ bucket (%, divergences pooled)"
MOVES = "How far an update moves the policy: mean abs(log π − log μ) (divergences pooled)"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_low_side_and_abs_log_ratio_tables_print_their_numbers(tmp_path):
    sections = _sections(_hand_runs(), tmp_path)
    low, moves = sections[LOW], sections[MOVES]
    assert _cells(low[0]) == [
        "level", "estimator", "clip low, μ < 0.01 (%)", "clip low, μ 0.01-0.1 (%)",
        "clip low, μ 0.1-0.5 (%)", "clip low, μ ≥ 0.5 (%)", "runs",
    ]  # fmt: skip
    zero = "0.00 [0.00, 0.00]"
    mc = ["2.2", "mc", zero, zero, _ci_text(0.01, 0.03, 100, 2), zero, "2"]
    atomic = ["2.2", "atomic", zero, zero, _ci_text(0.05, 0.07, 100, 2), zero, "2"]
    assert [_cells(ln) for ln in low[2:]] == [mc, atomic]  # Table 1's order: MC first
    assert mc[4] == "2.00 [-10.71, 14.71]"
    assert _cells(moves[0]) == [
        "level",
        "estimator",
        "mean abs(log π − log μ), all steps",
        "steps 1-10",
        "runs",
    ]
    assert [_cells(ln) for ln in moves[2:]] == [
        ["2.2", "mc", _ci_text(0.02, 0.04, 1, 4), _ci_text(0.05, 0.07, 1, 4), "2"],
        ["2.2", "atomic", _ci_text(0.01, 0.02, 1, 4), "0.0300 [0.0300, 0.0300]", "2"],
    ]


def test_an_older_csv_says_the_new_tables_are_not_recorded(tmp_path):
    sections = _sections(_hand_runs(new=False), tmp_path)
    assert sections[LOW] == sections[MOVES] == ["not recorded in this CSV"]
    assert sections["Mechanism (divergences pooled)"][2].startswith("| 2.2 | mc |")
